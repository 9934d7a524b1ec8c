"""Parse a recipe's headers with libclang into a plain model: records with exact layouts, constants, macro functions.

libclang gives the layouts (the compiler's own numbers); macros are translated by cexpr and evaluated here.
"""
from __future__ import annotations

import dataclasses
import functools
import keyword
import pathlib
import re
import subprocess

from rawgpu.autogen.gen import cexpr
from rawgpu.autogen.gen.recipes import Recipe


@dataclasses.dataclass
class Field:
  name: str             # C member name ("" never: anonymous members get _anonN)
  offset: int           # bytes (for bitfields: the storage's byte offset)
  size: int             # bytes
  ctype: str            # ctypes type expression
  anon: bool = False    # an anonymous struct/union member (its fields appear in the parent)
  flex: bool = False    # a flexible array member (size 0)


@dataclasses.dataclass
class Bitfield:
  name: str
  bit: int              # absolute bit offset in the record
  width: int
  ctype: str            # declared type (for the C check)
  signed: bool = False  # reads back sign-extended, as C does for signed bitfields
  unit: int = 4         # bytes of the declared type (the storage unit C allocates it in)
  run: int = 0          # consecutive bitfields (no ordinary member between them) share a run number


@dataclasses.dataclass
class Record:
  key: tuple
  name: str             # Python class name
  cspell: str           # how C spells the type (for the check program)
  union: bool
  size: int
  fields: list[Field]
  bitfields: list[Bitfield]
  storage: dict[str, tuple[str, int]]  # bitfield name -> (storage field name, shift inside it)
  byte_storage: set[str]
  anon_fwd: dict[str, str]             # bitfield name reachable through an anonymous member -> member
  deps: list[tuple]
  loc: tuple
  members: list[tuple[str, str]]       # (C-accessible member path, kind) for the check: kind field|flex|bits
  aliases: list[str] = dataclasses.field(default_factory=list)
  cbase: str = ""                      # nearest named C type enclosing this record, and the C path from it
  cpath: str = ""


@dataclasses.dataclass
class Const:
  name: str
  value: int | tuple[int, int]  # a tuple is an NVIDIA (hi, lo) bit range
  loc: tuple
  ioctl_struct: str | None = None  # Python class name of the ioctl argument
  is_ioctl: bool = False


@dataclasses.dataclass
class Func:
  name: str
  params: list[str]
  body: cexpr.Node
  loc: tuple


@dataclasses.dataclass
class Model:
  recipe: Recipe
  records: dict[tuple, Record]
  consts: dict[str, Const]
  funcs: dict[str, Func]
  order: list[tuple]                 # emission order of records
  samples: dict[str, list[list[int]]]


@functools.cache
def system_includes() -> tuple[str, ...]:
  """gcc's own include search list, so libclang and gcc read the same system headers."""
  r = subprocess.run(["gcc", "-E", "-Wp,-v", "-xc", "/dev/null"], capture_output=True, text=True)
  out, on = [], False
  for ln in r.stderr.splitlines():
    if ln.startswith("#include <...> search starts here"): on = True
    elif ln.startswith("End of search list"): on = False
    elif on: out.append(ln.strip())
  return tuple(out)


@functools.cache
def cxx_includes() -> tuple[str, ...]:
  r = subprocess.run(["g++", "-E", "-Wp,-v", "-xc++", "/dev/null"], capture_output=True, text=True)
  out, on = [], False
  for ln in r.stderr.splitlines():
    if ln.startswith("#include <...> search starts here"): on = True
    elif ln.startswith("End of search list"): on = False
    elif on: out.append(ln.strip())
  return tuple(out)


PY_RESERVED = set(keyword.kwlist) | {"None", "True", "False"}


def pyname(n: str) -> str:
  return n + "_" if n in PY_RESERVED else n


SAMPLES = [lambda i: i + 1, lambda i: 0xFFFFFFFF, lambda i: (0x12345678 * (i + 3) ^ 0x9E3779B9) & 0xFFFFFFFF,
           lambda i: 0]


class Builder:
  def __init__(self, recipe: Recipe, root: pathlib.Path, prelude_path: pathlib.Path):
    import clang.cindex as ci
    self.ci, self.r, self.root = ci, recipe, root
    named = recipe.header_names(root)
    self.headers = [str(p) for _, p in named]
    self.header_rel = [n for n, _ in named]
    self.roots = sorted({str(root)} | {str(pathlib.Path(h).parent) for h in self.headers}, key=len)
    src = prelude_path.parent / "rawgpu_tu.c"
    text = f'#include "{prelude_path}"\n' + "".join(f'#include "{h}"\n' for h in self.headers)
    args = recipe.clang_args(root, prelude_path.parent) + [f"-I{d}" for d in (cxx_includes() if recipe.cxx else system_includes())]
    args += ["-x", "c++", "-std=c++17"] if recipe.cxx else ["-std=gnu11"]
    self.tu = ci.Index.create().parse(str(src), args=args + ["-ferror-limit=0"], unsaved_files=[(str(src), text)],
                                      options=ci.TranslationUnit.PARSE_DETAILED_PROCESSING_RECORD)
    errs = [d for d in self.tu.diagnostics if d.severity >= 3]
    if errs: raise RuntimeError(f"{recipe.module}: libclang errors:\n" + "\n".join(str(d) for d in errs[:20]))
    self.records: dict[tuple, Record] = {}
    self.macros: dict[str, tuple[list[str] | None, list[str], tuple]] = {}
    self.enums: dict[str, tuple[int, tuple]] = {}
    self.typedef_name: dict[tuple, str] = {}
    self.type_sizes: dict[str, int] = {}
    self.tag_names: dict[str, tuple] = {}
    self.enum_type: dict[str, str] = {}
    self.typedef_records: dict[str, tuple] = {}

  # ---- helpers
  def loc(self, c) -> tuple:
    loc = c.location
    return (self.rel(loc.file.name if loc.file else ""), loc.line, loc.column)

  @functools.lru_cache(maxsize=None)
  def rel(self, name: str) -> str:
    rel = pathlib.Path(name).name
    try: rel = str(pathlib.Path(name).relative_to(self.root))
    except ValueError:
      if name in self.headers: rel = self.header_rel[self.headers.index(name)]
    return rel

  def in_headers(self, c) -> bool:
    f = c.location.file
    return bool(f) and f.name in self.headers

  def tag(self, decl) -> str:
    """The record's tag name, "" for an anonymous record (libclang spells those by their typedef name)."""
    sp, ts = decl.spelling, decl.type.spelling
    if not sp or "(" in sp or "(" in ts: return ""
    if self.r.cxx: return "" if decl.is_anonymous() else sp
    return sp if ts.startswith(("struct ", "union ")) else ""

  def key(self, decl) -> tuple:
    # the location alone is not unique: records expanded from one macro share it
    return ("rec",) + self.loc(decl) + (decl.hash,)

  # ---- walk
  def collect(self) -> None:
    ci = self.ci
    is_fn = self.ci.conf.lib.clang_Cursor_isMacroFunctionLike

    def walk(cur, ns: str):
      for c in cur.get_children():
        k = c.kind
        if k == ci.CursorKind.NAMESPACE:
          walk(c, ns + c.spelling + "::")
        elif k in (ci.CursorKind.LINKAGE_SPEC, ci.CursorKind.UNEXPOSED_DECL):  # extern "C" { ... }
          walk(c, ns)
        elif k == ci.CursorKind.MACRO_DEFINITION:
          toks = [t.spelling for t in c.get_tokens()]
          if not toks: continue
          if is_fn(c):
            close = toks.index(")")
            params = [t for t in toks[2:close] if t != ","]
            self.macros[c.spelling] = (params, toks[close + 1:], self.loc(c))
          else:
            self.macros[c.spelling] = (None, toks[1:], self.loc(c))
        elif k == ci.CursorKind.ENUM_DECL:
          for e in c.get_children():
            if e.kind == ci.CursorKind.ENUM_CONSTANT_DECL:
              self.enums[e.spelling] = (e.enum_value, self.loc(e), self.in_headers(e))
              self.enum_type[e.spelling] = c.spelling
        elif k == ci.CursorKind.TYPEDEF_DECL:
          t = c.underlying_typedef_type.get_canonical()
          d = t.get_declaration()
          if t.kind == ci.TypeKind.RECORD and d.is_definition():
            self.typedef_name.setdefault(self.key(d), ns + c.spelling)
            self.typedef_records[c.spelling] = self.key(d)
          if t.kind == ci.TypeKind.RECORD or t.kind == ci.TypeKind.ENUM or t.kind.name in (
              "UCHAR", "USHORT", "UINT", "ULONG", "ULONGLONG", "CHAR_S", "SCHAR", "SHORT", "INT", "LONG", "LONGLONG"):
            self.type_sizes[c.spelling] = t.get_size()
        elif k in (ci.CursorKind.STRUCT_DECL, ci.CursorKind.UNION_DECL) and c.is_definition() and c.spelling:
          self.type_sizes[("union " if k == ci.CursorKind.UNION_DECL else "struct ") + c.spelling] = c.type.get_size()
          self.tag_names.setdefault(c.spelling, self.key(c))
          walk(c, ns)  # enums and records declared inside

    walk(self.tu.cursor, "")

  def top_records(self) -> list:
    ci = self.ci
    out = []

    def walk(cur, ns: str):
      for c in cur.get_children():
        if c.kind == ci.CursorKind.NAMESPACE: walk(c, ns + c.spelling + "::")
        elif c.kind in (ci.CursorKind.LINKAGE_SPEC, ci.CursorKind.UNEXPOSED_DECL): walk(c, ns)
        elif c.kind in (ci.CursorKind.STRUCT_DECL, ci.CursorKind.UNION_DECL) and c.is_definition() and self.in_headers(c):
          out.append((c, ns))
        elif c.kind == ci.CursorKind.TYPEDEF_DECL and self.in_headers(c):
          d = c.underlying_typedef_type.get_canonical().get_declaration()
          if d.kind in (ci.CursorKind.STRUCT_DECL, ci.CursorKind.UNION_DECL) and d.is_definition():
            out.append((d, ns))
    walk(self.tu.cursor, "")
    return out

  # ---- types
  SCALARS = {"BOOL": "ctypes.c_bool", "CHAR_S": "ctypes.c_char", "CHAR_U": "ctypes.c_char", "SCHAR": "ctypes.c_int8",
             "UCHAR": "ctypes.c_uint8", "SHORT": "ctypes.c_int16", "USHORT": "ctypes.c_uint16", "INT": "ctypes.c_int32",
             "UINT": "ctypes.c_uint32", "LONG": "ctypes.c_int64", "ULONG": "ctypes.c_uint64",
             "LONGLONG": "ctypes.c_int64", "ULONGLONG": "ctypes.c_uint64", "FLOAT": "ctypes.c_float",
             "DOUBLE": "ctypes.c_double", "POINTER": "ctypes.c_uint64", "INT128": "(ctypes.c_uint8 * 16)",
             "UINT128": "(ctypes.c_uint8 * 16)"}

  def pytype(self, t, deps: list, parent: Record | None = None, fname: str = "") -> str:
    ci = self.ci
    t = t.get_canonical()
    k = t.kind
    if k == ci.TypeKind.CONSTANTARRAY:
      return f"({self.pytype(t.element_type, deps, parent, fname + '[0]')} * {t.element_count})"
    if k == ci.TypeKind.INCOMPLETEARRAY:
      return f"({self.pytype(t.element_type, deps, parent, fname + '[0]')} * 0)"
    if k == ci.TypeKind.ENUM:
      return self.pytype(t.get_declaration().enum_type, deps)
    if k == ci.TypeKind.RECORD:
      rec = self.record(t.get_declaration(), parent, fname)
      deps.append(rec.key)
      return rec.name
    if k.name in self.SCALARS: return self.SCALARS[k.name]
    raise NotImplementedError(f"type {t.spelling} ({k})")

  def record(self, decl, parent: Record | None = None, fname: str = "", ns: str = "", anon: bool = False) -> Record:
    ci = self.ci
    key = self.key(decl)
    if key in self.records: return self.records[key]
    union = decl.kind == ci.CursorKind.UNION_DECL
    tag = self.tag(decl)
    tdname = self.typedef_name.get(key)
    kw = "union" if union else "struct"
    if tag:
      name, cspell = tag, (f"{ns}{tag}" if self.r.cxx else f"{kw} {tag}")
    elif tdname:
      name, cspell = tdname.split("::")[-1], tdname
    elif parent is not None:
      name = f"{parent.name}_{fname.replace('[0]', '')}"
      cpath = parent.cpath if anon else (f"{parent.cpath}.{fname}" if parent.cpath else fname)
      cspell = None if anon else f"__typeof__((({parent.cbase} *)0)->{cpath})"
    else:
      raise NotImplementedError(f"anonymous record at {key}")
    if tdname and tdname.split("::")[-1] != name: aliases = [tdname.split("::")[-1]]
    else: aliases = []
    rec = Record(key, name, cspell, union, decl.type.get_size(), [], [], {}, set(), {}, [], self.loc(decl), [], aliases)
    if parent is not None and not tag and not tdname: rec.cbase, rec.cpath = parent.cbase, cpath
    else: rec.cbase, rec.cpath = cspell, ""
    self.records[key] = rec
    nanon = 0
    plain: list[Field] = []
    bits: list[Bitfield] = []
    run = 0
    for f in decl.type.get_fields():
      off = f.get_field_offsetof()
      if not f.is_bitfield() or union or not f.spelling: run += 1
      anon = "(anonymous" in f.spelling or "(unnamed" in f.spelling or not f.spelling
      if f.is_bitfield():
        if not f.spelling: continue  # unnamed padding bitfield
        ct = f.type.get_canonical()
        if ct.kind == ci.TypeKind.ENUM: ct = ct.get_declaration().enum_type.get_canonical()
        signed = ct.kind.name in ("SCHAR", "CHAR_S", "SHORT", "INT", "LONG", "LONGLONG")
        bits.append(Bitfield(f.spelling, off, f.get_bitfield_width(), f.type.get_canonical().spelling, signed,
                             ct.get_size(), run))
        rec.members.append((f.spelling, "bits"))
        continue
      if anon:
        fname_ = f"_anon{nanon}"
        nanon += 1
        sub = self.record(f.type.get_canonical().get_declaration(), rec, fname_, anon=True)
        rec.deps.append(sub.key)
        plain.append(Field(fname_, off // 8, f.type.get_size(), sub.name, anon=True))
        for path, kind in sub.members:
          rec.members.append((path, kind))
          if kind == "bits": rec.anon_fwd[path] = fname_
        continue
      size = f.type.get_size()
      ct = self.pytype(f.type, rec.deps, rec, f.spelling)
      flex = f.type.get_canonical().kind == ci.TypeKind.INCOMPLETEARRAY
      if size < 0 and not flex: raise NotImplementedError(f"field {f.spelling} of incomplete type {f.type.spelling}")
      plain.append(Field(f.spelling, off // 8, max(size, 0), ct, flex=flex))
      rec.members.append((f.spelling, "flex" if flex else "field"))
    rec.fields = plain
    rec.bitfields = bits
    self.place_bitfields(rec)
    return rec

  def place_bitfields(self, rec: Record) -> None:
    """Give every bitfield an explicit integer storage field: the unit C allocates it in (its declared type, aligned)
    when that unit holds no ordinary member, else the bytes the run of bitfields covers (merged where they touch)."""
    if not rec.bitfields: return
    ints = {1: "ctypes.c_uint8", 2: "ctypes.c_uint16", 4: "ctypes.c_uint32", 8: "ctypes.c_uint64"}
    plain = [(f.offset, f.offset + f.size) for f in rec.fields]
    clash = lambda lo, hi: not rec.union and any(a < hi and lo < b for a, b in plain)
    runs: dict[int, list[Bitfield]] = {}
    for b in rec.bitfields: runs.setdefault(b.run, []).append(b)
    spans: list[tuple[int, int, list[Bitfield]]] = []  # (byte lo, byte hi, bitfields)
    for run in runs.values():
      units: dict[int, list[Bitfield]] = {}
      ok = True
      for b in run:
        start = b.bit // (8 * b.unit) * b.unit
        if b.bit + b.width > (start + b.unit) * 8 or start + b.unit > rec.size or clash(start, start + b.unit): ok = False
        units.setdefault(start, []).append(b)
      if ok and len({b.unit for b in run}) == 1:
        spans += [(start, start + run[0].unit, bs) for start, bs in units.items()]
        continue
      merged: list[list] = []
      for b in sorted(run, key=lambda b: b.bit):
        lo, hi = b.bit // 8, (b.bit + b.width + 7) // 8
        if merged and lo < merged[-1][1]: merged[-1][1], merged[-1][2] = max(hi, merged[-1][1]), merged[-1][2] + [b]
        else: merged.append([lo, hi, [b]])
      spans += [tuple(m) for m in merged]
    new_fields = []
    for n, (lo, hi, bs) in enumerate(sorted(spans, key=lambda sp: (sp[0], sp[2][0].bit))):
      nm = f"_bf{n}"
      if hi - lo in ints: new_fields.append(Field(nm, lo, hi - lo, ints[hi - lo]))
      else:
        new_fields.append(Field(nm, lo, hi - lo, f"(ctypes.c_uint8 * {hi - lo})"))
        rec.byte_storage.add(nm)
      for b in bs: rec.storage[b.name] = (nm, b.bit - lo * 8)
    rec.fields = sorted(rec.fields + new_fields, key=lambda f: (f.offset, f.name.startswith("_bf")))

  # ---- macros
  def is_type(self, words: tuple[str, ...]) -> bool:
    s = " ".join(words)
    if s in cexpr.INT_TYPES or s in self.type_sizes: return True
    if words[0] in ("struct", "union") and len(words) == 2: return s in self.type_sizes
    if words[0] == "enum" and len(words) == 2: return True
    return False

  def sizeof(self, spelling: str) -> int:
    if spelling in cexpr.INT_TYPES: return cexpr.INT_TYPES[spelling][0]
    if spelling.startswith("enum "): return 4
    if spelling in self.type_sizes: return self.type_sizes[spelling]
    raise cexpr.EvalError(f"sizeof({spelling})")

  @functools.cache
  def parsed(self, name: str) -> cexpr.Node:
    params, body, _ = self.macros[name]
    if any(t in ("#", "##", "{", "}", ";", "do", "while", "if", "return", "__attribute__", '"') or t.startswith('"')
           for t in body):
      raise cexpr.NotExpr("not an expression macro")
    return cexpr.Parser(body, self.is_type).parse()

  def range_node(self, node: cexpr.Node) -> cexpr.Node | None:
    """The hi:lo node when a macro body is an NVIDIA bit range, directly or through a macro such as MW(hi:lo)."""
    for _ in range(8):
      if node.op == "range": return node
      if node.op != "call" or node.value not in self.macros or self.macros[node.value][0] is None: return None
      params = self.macros[node.value][0]
      if len(params) != len(node.args): return None
      node = cexpr.subst(self.parsed(node.value), dict(zip(params, node.args)))
    return None

  def range_of(self, node: cexpr.Node, stack: tuple = ()) -> tuple[int, int] | None:
    r = self.range_node(node)
    return None if r is None else (self.eval(r.args[0], stack), self.eval(r.args[1], stack))

  def value(self, name: str, stack: tuple = ()) -> int:
    if name in self.enums: return self.enums[name][0]
    if name not in self.macros or self.macros[name][0] is not None or name in stack:
      raise cexpr.EvalError(f"unknown {name}")
    return self.eval(self.parsed(name), stack + (name,))

  def eval(self, node: cexpr.Node, stack: tuple = (), info: dict | None = None) -> int:
    def call(fn: str, args: list) -> int:
      if fn in ("_IO", "_IOR", "_IOW", "_IOWR") and info is not None:
        info["ioctl"] = True
        if len(args) == 3 and args[2].op == "type": info["type"] = args[2].value
      if fn not in self.macros or self.macros[fn][0] is None or fn in stack: raise cexpr.EvalError(f"call {fn}")
      params = self.macros[fn][0]
      if len(params) != len(args): raise cexpr.EvalError(f"{fn} arity")
      body = cexpr.subst(self.parsed(fn), dict(zip(params, args)))
      return self.eval(body, stack + (fn,), info)
    return cexpr.evaluate(node, lambda n: self.value(n, stack), call, self.sizeof)

  def build(self) -> Model:
    self.collect()
    keep = re.compile(self.r.keep) if self.r.keep else None
    drop = re.compile(self.r.drop) if self.r.drop else None
    only = {h: re.compile(rx) for h, rx in self.r.only}

    def wanted(n: str, file: str = "") -> bool:
      if file in only and not (only[file].search(n) or only[file].search(self.enum_type.get(n, "") or "\0")):
        return False
      return bool((keep is None or keep.search(n)) and not (drop and drop.search(n)))
    # records
    tops = []
    for decl, ns in self.top_records():
      tag = self.tag(decl)
      nm = tag or self.typedef_name.get(self.key(decl), "").split("::")[-1]
      td = self.typedef_name.get(self.key(decl), "").split("::")[-1]
      f = self.loc(decl)[0]
      if nm and (wanted(nm, f) or (td and wanted(td, f))):
        try:
          tops.append(self.record(decl, None, "", ns))
        except NotImplementedError as e:
          print(f"  skip struct {nm}: {e}")
    # constants: enums and object-like macros of the recipe's own headers
    consts: dict[str, Const] = {}
    for n, (v, loc, mine) in self.enums.items():
      if mine and wanted(n, loc[0]): consts[n] = Const(n, v, loc)
    funcs: dict[str, Func] = {}
    hdr_rel = set(self.header_rel)
    for n, (params, body, loc) in self.macros.items():
      if loc[0] not in hdr_rel or not wanted(n, loc[0]) or n.startswith("_") and n.endswith("_H_"): continue
      try:
        node = self.parsed(n)
      except cexpr.NotExpr:
        continue
      if params is None:
        info: dict = {}
        try:
          rng = self.range_of(node, (n,))
          if rng is not None:
            consts[n] = Const(n, rng, loc)
            continue
          v = self.eval(node, (n,), info)
        except (cexpr.EvalError, cexpr.NotExpr, RecursionError):
          continue
        c = Const(n, v, loc)
        if info.get("ioctl"):
          c.is_ioctl = True
          t = info.get("type")
          k = self.tag_names.get(t.split()[1]) if t and t.startswith(("struct ", "union ")) else \
              self.typedef_records.get(t or "")
          if k in self.records: c.ioctl_struct = self.records[k].name
        consts[n] = c
      else:
        funcs[n] = Func(n, params, self.range_node(node) or node, loc)
    # function macros: keep those whose every name resolves, and that evaluate on a plain sample
    model_funcs: dict[str, Func] = {}
    samples: dict[str, list[list[int]]] = {}
    for n, f in funcs.items():
      ok = True
      for nm in cexpr.names(f.body):
        if nm in f.params: continue
        if nm in consts or nm in funcs: continue
        try:
          self.value(nm)
          consts.setdefault(nm, Const(nm, self.value(nm), self.macros[nm][2] if nm in self.macros else self.enums[nm][1]))
        except (cexpr.EvalError, cexpr.NotExpr, KeyError):
          if nm in self.macros and self.macros[nm][0] is not None:
            continue  # a function macro from elsewhere: checked when evaluating
          ok = False
          break
      if not ok: continue
      good = []
      for mk in SAMPLES:
        args = [mk(i) for i in range(len(f.params))]
        try:
          body = cexpr.subst(f.body, {p: cexpr.Node("num", (), a) for p, a in zip(f.params, args)})
          for part in (body.args if body.op == "range" else (body,)): self.eval(part, (n,))
          good.append(args)
        except (cexpr.EvalError, cexpr.NotExpr, RecursionError):
          pass
      if not good: continue
      model_funcs[n] = f
      samples[n] = good[:3] if f.params else [[]]
    # function macros calling macros from other headers: pull those in too
    changed = True
    while changed:
      changed = False
      for f in list(model_funcs.values()):
        for nm in cexpr.names(f.body):
          if nm in f.params or nm in consts or nm in model_funcs: continue
          if nm in self.macros and self.macros[nm][0] is not None:
            try:
              node = self.parsed(nm)
            except cexpr.NotExpr:
              del model_funcs[f.name]
              break
            model_funcs[nm] = Func(nm, self.macros[nm][0], node, self.macros[nm][2])
            changed = True
          elif nm not in consts:
            try:
              consts[nm] = Const(nm, self.value(nm), self.macros[nm][2])
            except (cexpr.EvalError, cexpr.NotExpr, KeyError):
              del model_funcs[f.name]
              break
    for n in [n for n in model_funcs if n not in samples]: samples[n] = []
    # emission order: dependencies first, then source position
    order: list[tuple] = []
    seen: set = set()

    def visit(k):
      if k in seen: return
      seen.add(k)
      for d in self.records[k].deps: visit(d)
      order.append(k)
    for rec in sorted(tops, key=lambda r: r.loc): visit(rec.key)
    records = {k: self.records[k] for k in order}
    names = {r.name for r in records.values()}
    for ioc, st in self.r.ioctl_args:
      if ioc not in consts or st not in names: raise RuntimeError(f"{self.r.module}: ioctl_args {ioc} -> {st} unknown")
      consts[ioc].ioctl_struct = st
    for c in consts.values():
      if c.ioctl_struct and c.ioctl_struct not in names: c.ioctl_struct = None
    m = Model(self.r, records, consts, model_funcs, order, samples)
    m.sizeof = self.sizeof
    return m
