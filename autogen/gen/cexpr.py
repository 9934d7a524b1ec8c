"""C macro bodies -> a small expression tree that can be evaluated (constants) or written as Python (functions).

Only integer expressions are accepted; anything else (strings, statements, pointers, member access) raises
NotExpr and the macro is left out. Python output is fully parenthesised, so C's operator precedence is kept.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Callable


class NotExpr(Exception):
  """The token list is not an integer expression we can translate."""


@dataclasses.dataclass(frozen=True)
class Node:
  op: str                  # num, name, call, un, bin, cond, cast, sizeof, type
  args: tuple = ()
  value: int | str | None = None


INT_TYPES = {  # C type spelling -> (bytes, signed)
  "char": (1, True), "signed char": (1, True), "unsigned char": (1, False), "short": (2, True),
  "unsigned short": (2, False), "int": (4, True), "unsigned": (4, False), "unsigned int": (4, False),
  "long": (8, True), "unsigned long": (8, False), "long long": (8, True), "unsigned long long": (8, False),
  "signed": (4, True), "signed int": (4, True), "long int": (8, True), "unsigned long int": (8, False),
  "short int": (2, True), "unsigned short int": (2, False), "_Bool": (1, False), "bool": (1, False),
}
for _b in (8, 16, 32, 64):
  for _n, _s in ((f"uint{_b}_t", False), (f"int{_b}_t", True), (f"__u{_b}", False), (f"__s{_b}", True),
                 (f"u{_b}", False), (f"s{_b}", True), (f"__le{_b}", False), (f"__be{_b}", False),
                 (f"NvU{_b}", False), (f"NvS{_b}", True)):
    INT_TYPES[_n] = (_b // 8, _s)
INT_TYPES.update({"size_t": (8, False), "uintptr_t": (8, False), "NvU32": (4, False), "NvV32": (4, False),
                  "NvBool": (1, False), "NvHandle": (4, False), "NvP64": (8, False)})
TYPE_WORDS = {"unsigned", "signed", "int", "long", "short", "char", "struct", "union", "enum", "const",
              "volatile", "_Bool"}

_NUM = re.compile(r"^(0[xX][0-9a-fA-F]+|0[bB][01]+|0[0-7]*|[1-9][0-9]*)([uUlL]*)$")


def parse_int(tok: str) -> int | None:
  m = _NUM.match(tok)
  if not m: return None
  s = m.group(1)
  if s[:2] in ("0x", "0X"): return int(s, 16)
  if s[:2] in ("0b", "0B"): return int(s[2:], 2)
  if len(s) > 1 and s[0] == "0": return int(s, 8)
  return int(s)


_CHAR_ESC = {"n": 10, "t": 9, "r": 13, "0": 0, "\\": 92, "'": 39, '"': 34}


class Parser:
  """Precedence-climbing parser over C tokens. `is_type(words)` says whether a token run names a type."""

  BIN = [("||",), ("&&",), ("|",), ("^",), ("&",), ("==", "!="), ("<", ">", "<=", ">="), ("<<", ">>"),
         ("+", "-"), ("*", "/", "%")]

  def __init__(self, toks: list[str], is_type: Callable[[tuple[str, ...]], bool]):
    self.t, self.i, self.is_type = toks, 0, is_type

  def peek(self, k: int = 0) -> str | None:
    return self.t[self.i + k] if self.i + k < len(self.t) else None

  def take(self, want: str | None = None) -> str:
    tok = self.peek()
    if tok is None or (want is not None and tok != want): raise NotExpr(f"expected {want!r}, got {tok!r}")
    self.i += 1
    return tok

  def parse(self) -> Node:
    if not self.t: raise NotExpr("empty")
    n = self.expr()
    if self.peek() == ":":  # NVIDIA's "hi:lo" bit ranges (used as DRF_* macro arguments)
      self.take()
      n = Node("range", (n, self.expr()))
    if self.peek() is not None: raise NotExpr(f"trailing {self.peek()!r}")
    return n

  def expr(self) -> Node:
    n = self.cond()
    if self.peek() == ",": raise NotExpr("comma operator")
    return n

  def cond(self) -> Node:
    c = self.binary(0)
    if self.peek() == "?":
      self.take()
      a = self.cond()
      self.take(":")
      b = self.cond()
      return Node("cond", (c, a, b))
    return c

  def binary(self, level: int) -> Node:
    if level == len(self.BIN): return self.unary()
    n = self.binary(level + 1)
    while self.peek() in self.BIN[level]:
      op = self.take()
      n = Node("bin", (n, self.binary(level + 1)), op)
    return n

  def type_run(self, start: int) -> int | None:
    """Index just past a type name starting at `start` and closed by ')', else None."""
    j = start
    words = []
    while j < len(self.t) and self.t[j] != ")":
      words.append(self.t[j])
      j += 1
    if j >= len(self.t) or not words: return None
    return j if self.is_type(tuple(words)) else None

  def unary(self) -> Node:
    tok = self.peek()
    if tok in ("-", "+", "~", "!"):
      self.take()
      return Node("un", (self.unary(),), tok)
    if tok == "sizeof":
      self.take()
      if self.peek() == "(":
        end = self.type_run(self.i + 1)
        if end is not None:
          words = tuple(self.t[self.i + 1:end])
          self.i = end + 1
          return Node("sizeof", (Node("type", (), " ".join(words)),))
        if re.match(r"^[A-Za-z_]\w*$", self.peek(1) or "") and self.peek(2) == ")":
          name = self.peek(1)
          self.i += 3
          return Node("sizeof", (Node("name", (), name),))
      raise NotExpr("sizeof of an expression")
    if tok == "(":
      end = self.type_run(self.i + 1)
      if end is not None:
        words = " ".join(self.t[self.i + 1:end])
        self.i = end + 1
        return Node("cast", (self.unary(),), words)
    return self.postfix()

  def postfix(self) -> Node:
    n = self.primary()
    while self.peek() == "(":
      if n.op != "name": raise NotExpr("call of a non-name")
      self.take("(")
      args = []
      if self.peek() != ")":
        while True:
          end = self.type_arg()
          arg = end if end is not None else self.cond()
          if end is None and self.peek() == ":":
            self.take()
            arg = Node("range", (arg, self.cond()))
          args.append(arg)
          if self.peek() == ",":
            self.take()
            continue
          break
      self.take(")")
      n = Node("call", tuple(args), n.value)
    if self.peek() in ("[", ".", "->", "++", "--"): raise NotExpr("not an integer expression")
    return n

  def type_arg(self) -> Node | None:
    """A macro argument that is a type name (`struct foo`, `__u32`), as in _IOWR(base, nr, struct foo)."""
    j, words = self.i, []
    while j < len(self.t) and self.t[j] not in (",", ")", "("):
      words.append(self.t[j])
      j += 1
    if j < len(self.t) and self.t[j] != "(" and words and all(re.match(r"^[A-Za-z_]\w*$", w) for w in words) \
        and self.is_type(tuple(words)):
      self.i = j
      return Node("type", (), " ".join(words))
    return None

  def primary(self) -> Node:
    tok = self.take()
    if tok == "(":
      n = self.expr()
      self.take(")")
      return n
    v = parse_int(tok)
    if v is not None: return Node("num", (), v)
    if len(tok) >= 3 and tok[0] == "'" and tok[-1] == "'":
      body = tok[1:-1]
      if len(body) == 1: return Node("num", (), ord(body))
      if len(body) == 2 and body[0] == "\\" and body[1] in _CHAR_ESC: return Node("num", (), _CHAR_ESC[body[1]])
      raise NotExpr(f"char literal {tok}")
    if re.match(r"^[A-Za-z_]\w*$", tok) and tok not in TYPE_WORDS: return Node("name", (), tok)
    raise NotExpr(f"unexpected token {tok!r}")


def names(n: Node) -> set[str]:
  out = {n.value} if n.op in ("name", "call") else set()
  for a in n.args: out |= names(a)
  return out


def subst(n: Node, env: dict[str, Node]) -> Node:
  if n.op == "name" and n.value in env: return env[n.value]
  if n.op == "call" and n.value in env and env[n.value].op == "name":
    return Node("call", tuple(subst(a, env) for a in n.args), env[n.value].value)
  if not n.args: return n
  return Node(n.op, tuple(subst(a, env) for a in n.args), n.value)


class EvalError(Exception):
  pass


def _cast(v: int, spelling: str) -> int:
  size, signed = INT_TYPES[spelling]
  v &= (1 << (8 * size)) - 1
  if signed and v >> (8 * size - 1): v -= 1 << (8 * size)
  return v


def evaluate(n: Node, lookup: Callable[[str], int], call: Callable[[str, list], int], sizeof: Callable[[str], int]) -> int:
  """Mathematical value of the tree (Python ints: no C overflow; casts to integer types do wrap)."""
  ev = lambda x: evaluate(x, lookup, call, sizeof)
  if n.op == "num": return n.value
  if n.op == "name": return lookup(n.value)
  if n.op == "sizeof":
    if n.args[0].op != "type": raise EvalError("sizeof of a value")
    return sizeof(n.args[0].value)
  if n.op == "cast":
    if n.value not in INT_TYPES: raise EvalError(f"cast to {n.value}")
    return _cast(ev(n.args[0]), n.value)
  if n.op == "call": return call(n.value, list(n.args))
  if n.op == "un":
    v = ev(n.args[0])
    return {"-": -v, "+": v, "~": ~v, "!": int(not v)}[n.value]
  if n.op == "cond": return ev(n.args[1]) if ev(n.args[0]) else ev(n.args[2])
  if n.op == "type": raise EvalError("type used as a value")
  if n.op == "range": raise EvalError("bit range used as a value")
  a = ev(n.args[0])
  if n.value == "&&": return int(bool(a) and bool(ev(n.args[1])))
  if n.value == "||": return int(bool(a) or bool(ev(n.args[1])))
  b = ev(n.args[1])
  op = n.value
  if op in ("<<", ">>"):
    if not 0 <= b < 128: raise EvalError(f"shift by {b}")
    return a << b if op == "<<" else a >> b
  if op in ("/", "%"):
    if b == 0: raise EvalError("division by zero")
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    return q if op == "/" else a - q * b
  return {"|": a | b, "^": a ^ b, "&": a & b, "==": int(a == b), "!=": int(a != b), "<": int(a < b),
          ">": int(a > b), "<=": int(a <= b), ">=": int(a >= b), "+": a + b, "-": a - b, "*": a * b}[op]


def to_python(n: Node, name_of: Callable[[str], str], sizeof: Callable[[str], int]) -> str:
  """Python source for the tree; names are mapped through `name_of` (parameters, module constants, functions)."""
  py = lambda x: to_python(x, name_of, sizeof)
  if n.op == "num": return hex(n.value) if n.value >= 64 else str(n.value)
  if n.op == "name": return name_of(n.value)
  if n.op == "sizeof":
    if n.args[0].op != "type": raise NotExpr("sizeof of a parameter")
    return str(sizeof(n.args[0].value))
  if n.op == "cast":
    size, signed = INT_TYPES[n.value]
    if signed: return f"_sx({py(n.args[0])}, {8 * size})"
    return f"({py(n.args[0])} & {hex((1 << (8 * size)) - 1)})"
  if n.op == "call": return f"{name_of(n.value)}({', '.join(py(a) for a in n.args)})"
  if n.op == "un":
    if n.value == "!": return f"int(not {py(n.args[0])})"
    return f"({n.value}{py(n.args[0])})"
  if n.op == "cond": return f"({py(n.args[1])} if {py(n.args[0])} else {py(n.args[2])})"
  if n.op in ("type", "range"): raise NotExpr(f"{n.op} in Python output")
  a, b, op = py(n.args[0]), py(n.args[1]), n.value
  if op == "&&": return f"int(bool({a}) and bool({b}))"
  if op == "||": return f"int(bool({a}) or bool({b}))"
  if op in ("==", "!=", "<", ">", "<=", ">="): return f"int({a} {op} {b})"
  if op == "/": return f"_cdiv({a}, {b})"
  if op == "%": return f"_cmod({a}, {b})"
  return f"({a} {op} {b})"
