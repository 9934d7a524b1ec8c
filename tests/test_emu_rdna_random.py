"""Differential test of the RDNA emulator: random OpenCL C kernels (integer and float expressions, 64-bit math,
loops, divergent branches, LDS with a barrier, atomics) compiled for gfx1100 (wave32 and wave64) and gfx1201 with
clang-19, and the same source compiled for the host with gcc. Outputs must agree bit for bit (any NaN equals any
NaN: payloads are not specified by C).

The same text serves both sides through a few macros: on the host each kernel runs phase by phase for every
work-item of a group (the barrier separates the phases), which is exactly the semantics of one barrier."""
from __future__ import annotations
import ctypes, os, random, re

import numpy as np
import pytest

from test_emu_rdna_common import compile_cl, host_so, kernels, launch, need

WG, GROUPS, NOUT = 64, 4, 4
N = WG * GROUPS
SEEDS = range(int(os.environ.get("RAWGPU_RDNA_SEEDS", "60")))
# seeds beyond the default range that found emulator bugs: an f16 inline constant read as f32's low half (185), f64
# division by a huge value (195), a 16-bit operand's literal (247), f32 division of huge values with flushing (410);
# on gfx942: SDWA carry ops (422), v_fma_mixlo_f16 rounding once instead of an f32 fma then f16 (468); a wave64
# carry-out to NULL clobbering M0 before v_movreld (1130); f64 division with a subnormal quotient rounding twice (1342);
# gfx942's v_mad_legacy_u16 (2001); v_fma_f64 of a finite product past the range and an infinite addend (5013); the
# 256-instruction block cut falling between s_set_gpr_idx_on and its v_mov_b32, which then wrote the base VGPR (8095)
FOUND = [185, 195, 247, 410, 422, 468, 1130, 1342, 2001, 5013, 8095]
BATCH = 20   # kernels per code object: clang runs a few times, not once per kernel

PRELUDE = r"""
#ifdef __OPENCL_C_VERSION__
#define KDEF(name) __kernel void name(__global const int *ii, __global const float *ff, __global const double *dd, \
  __global const long *ll, __global int *oi, __global float *of, __global double *od, __global long *ol, __global int *acc, \
  __global const short *ss, __global short *os, __global uchar *ob)
#define LDS_DECL __local int lds_i[WG]; __local float lds_f[WG]; __local short lds_s[WG]; __local uchar lds_b[WG];
#define PHASE(n)
#define SYNC __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup"); __builtin_amdgcn_s_barrier(); \
  __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
#define TID ((int)__builtin_amdgcn_workitem_id_x())
#define GRP ((int)__builtin_amdgcn_workgroup_id_x())
#define AADD(p, v) __atomic_fetch_add((p), (v), __ATOMIC_RELAXED)
#define AMAX(p, v) __atomic_fetch_max((p), (v), __ATOMIC_RELAXED)
#define AOR(p, v) __atomic_fetch_or((p), (v), __ATOMIC_RELAXED)
#define AXOR(p, v) __atomic_fetch_xor((p), (v), __ATOMIC_RELAXED)
typedef unsigned int uint32; typedef unsigned long uint64; typedef long int64;
typedef int int32v __attribute__((ext_vector_type(32)));
#define OPAQUE(v) __asm__ volatile("" : "+v"(v))
#define OPAQUEF(v) __asm__ volatile("" : "+v"(v))
#else
#include <math.h>
#include <stdint.h>
#define KDEF(name) __attribute__((noinline)) void name(int _phase, int _tid, int _grp, int *lds_i, float *lds_f, short *lds_s, uchar *lds_b, \
  const int *ii, const float *ff, const double *dd, const int64_t *ll, int *oi, float *of, double *od, int64_t *ol, int *acc, \
  const short *ss, short *os, uchar *ob)
#define LDS_DECL
#define PHASE(n) if (_phase == n)
#define SYNC
#define TID _tid
#define GRP _grp
#define AADD(p, v) (*(p) += (v))
#define AMAX(p, v) (*(p) = *(p) > (v) ? *(p) : (v))
#define AOR(p, v) (*(p) |= (v))
#define AXOR(p, v) (*(p) ^= (v))
typedef uint32_t uint32; typedef uint64_t uint64; typedef int64_t int64;
typedef unsigned int uint; typedef unsigned char uchar; typedef unsigned short ushort;
typedef int int32v __attribute__((vector_size(128)));
#define OPAQUE(v) __asm__ volatile("" : "+r"(v))
#define OPAQUEF(v) __asm__ volatile("" : "+x"(v))
#endif
#define WG @WG@
static inline int f2i(float x) { return x != x ? 0 : x > 2e9f ? 2000000000 : x < -2e9f ? -2000000000 : (int)x; }
static inline int d2i(double x) { return x != x ? 0 : x > 2e9 ? 2000000000 : x < -2e9 ? -2000000000 : (int)x; }
static inline int64 d2l(double x) { return x != x ? 0 : x > 4e18 ? 4000000000000000000L : x < -4e18 ? -4000000000000000000L : (int64)x; }
static inline int sdiv(int a, int b) { return b == 0 || (b == -1 && a == (-2147483647 - 1)) ? a : a / b; }
static inline int smod(int a, int b) { return b == 0 || b == -1 ? a : a % b; }
/* clang-19 miscompiles unsigned division when it can prove many sign bits of the operands (LowerDIVREM24 takes its
   24-bit float path for values near 2^32: llvm/llvm-project#194829); an empty asm hides what it could prove */
static inline uint32 udiv(uint32 a, uint32 b) { OPAQUE(a); OPAQUE(b); return b == 0 ? a : a / b; }
static inline uint32 umod(uint32 a, uint32 b) { OPAQUE(a); OPAQUE(b); return b == 0 ? a : a % b; }
static inline int64 ldiv_(int64 a, int64 b) { return b == 0 || b == -1 ? a : a / b; }
static inline uint64 uldiv(uint64 a, uint64 b) { return b == 0 ? a : a / b; }
/* a value the compilers cannot see (flush mode: an operation of constants is computed at run time, see Gen.keep) */
static inline float keepf(float v) { OPAQUEF(v); return v; }
static inline double keepd(double v) { OPAQUEF(v); return v; }
/* a half's bits; every NaN one pattern (C does not specify a NaN's sign or payload), every zero +0 (LLVM folds 0 - x
   into -x, so a zero's sign is not the source program's) */
static inline short h2s(_Float16 h) { union { _Float16 h; short s; } v; v.h = h; return h != h ? (short)0x7e00 : h == 0 ? (short)0 : v.s; }
""".replace("@WG@", str(WG))

class Gen:
  """Random typed expressions and statements over the kernel's inputs and locals."""
  def __init__(self, seed: int, flush: bool = False):
    self.r = random.Random(seed)
    # the flush-mode variant (test_emu_rdna_flush.py) has no denormal literal: gcc folds constants without knowing
    # the run-time MXCSR, so a folded 1e-40f would not be flushed on the host. Nor -0.0 or 1.0: -0.0 - x, x + -0.0 and
    # x * 1.0 are exact by IEEE's rules, so LLVM makes them a sign flip or x itself, which flushes nothing, where the
    # host computes them with FTZ|DAZ (seed 7260: -0.0 - p of a denormal p was -p on the GPU, -0 on the host)
    self.flush = flush
    self.vars = {"int": ["a", "b"], "float": ["x", "y"], "double": ["p"], "int64": ["q"], "uint32": ["u"], "half": ["h"]}
    self.n = 0
    self.names = {v for vs in self.vars.values() for v in vs} | {"keepf", "keepd"}

  def lit(self, t: str) -> str:
    r = self.r
    if t == "int": return str(r.choice([0, 1, -1, 2, 3, 7, 31, 255, -128, 1 << 20, 123456789, -2147483647]))
    if t == "uint32": return f"{r.choice([0, 1, 5, 0xff, 0x80000000, 0xffffffff, 12345])}u"
    if t == "int64": return f"{r.choice([0, 1, -1, 3, 1 << 40, -(1 << 35), 123456789012345])}L"
    if t == "float": return r.choice(["0.5f", "1.5f" if self.flush else "1.0f", "-2.0f", "3.25f", "1e-3f", "1e20f", "-0.5f" if self.flush else "-0.0f",
                                      "7.0f", "2e-38f" if self.flush else "1e-40f", "0.1f"])
    if t == "half": return r.choice(["(_Float16)0.5f", "(_Float16)1.0f", "(_Float16)-2.0f", "(_Float16)65504.0f", "(_Float16)6e-8f",
                                     "(_Float16)-0.0f", "(_Float16)0.1f", "(_Float16)3.0e-5f"])
    return r.choice(["0.5", "1.5" if self.flush else "1.0", "-3.0", "1e-300", "2.5e10", "0.1", "-0.5" if self.flush else "-0.0"])

  def keep(self, t: str, *ops: str) -> tuple[str, ...]:
    """The operands of a float or double operation; in flush mode, if none of them reads a variable, the first is
    hidden (keepf/keepd): clang folds an operation of constants by IEEE's rules whatever -fdenormal-fp-math says (its
    result need not be flushed: LLVM's LangRef makes flushing outputs optional), where the host computes it at run time
    under FTZ|DAZ (-frounding-math). Seed 8134: (float)(0.1) * 2e-38f was the constant 2e-39 on the GPU, 0 on the host,
    and LLVM then folded (float)a != 2e-39 to true."""
    if self.flush and not any(set(re.findall(r"(?<![\w.])[A-Za-z_]\w*", o)) & self.names for o in ops):
      ops = (f"keep{'f' if t == 'float' else 'd'}({ops[0]})",) + ops[1:]
    return ops

  def var(self, t: str) -> str:
    return self.r.choice(self.vars[t])

  def expr(self, t: str, d: int = 0) -> str:
    r = self.r
    if d > 3 or r.random() < 0.2: return self.var(t) if r.random() < 0.75 else self.lit(t)
    e = lambda tt=t: self.expr(tt, d + 1)
    if t == "int":
      k = r.randrange(14)
      if k < 5: return f"({e()} {r.choice(['+', '-', '*', '&', '|', '^'])} {e()})"
      if k == 5: return f"({e()} {r.choice(['<<', '>>'])} ({e()} & 31))"
      if k == 6: return f"{r.choice(['sdiv', 'smod'])}({e()}, {e()})"
      if k == 7: return f"({e('float')} {r.choice(['<', '<=', '==', '!=', '>'])} {e('float')})"
      if k == 8: return f"({e()} {r.choice(['<', '>', '==', '>='])} {e()} ? {e()} : {e()})"
      if k == 9: return f"f2i({e('float')})"
      if k == 10: return f"(int)({e('int64')} >> {r.randrange(64)})"
      if k == 11: return f"(int)(short)({e()})"
      if k == 12: return f"(int){r.choice(['udiv', 'umod'])}({e('uint32')}, ({e('uint32')} | 1u))"
      return f"d2i({e('double')})"
    if t == "uint32":
      k = r.randrange(6)
      if k < 3: return f"({e()} {r.choice(['+', '-', '*', '&', '|', '^'])} {e()})"
      if k == 3: return f"({e()} >> ({e('int')} & 31))"
      if k == 4: return f"udiv({e()}, {e()})"
      return f"(uint32)({e('int')})"
    if t == "int64":
      k = r.randrange(7)
      if k < 3: return f"({e()} {r.choice(['+', '-', '*', '&', '^'])} {e()})"
      if k == 3: return f"({e()} {r.choice(['<<', '>>'])} ({e('int')} & 63))"
      if k == 4: return f"(int64)({e('int')})"
      if k == 5: return f"ldiv_({e()}, {e()})"
      return f"d2l({e('double')})"
    if t == "float":
      k = r.randrange(13)
      if k < 4: l, o, rr = e(), r.choice(['+', '-', '*']), e(); l, rr = self.keep(t, l, rr); return f"({l} {o} {rr})"
      if k == 4: l, rr = self.keep(t, e(), e()); return f"({l} / {rr})"
      if k == 5: return f"__builtin_fmaf({', '.join(self.keep(t, e(), e(), e()))})"
      if k == 6: return f"(float)({e('int')})"
      if k == 7: return f"__builtin_{r.choice(['floorf', 'ceilf', 'truncf', 'rintf', 'fabsf', 'sqrtf'])}({e()})"
      if k == 8: return f"({e('int')} > {e('int')} ? {e()} : {e()})"
      if k == 9: return f"(float)({e('double')})"
      # C and LLVM leave the sign of a zero from fmin/fmax open; adding +0 makes every zero +0 on both sides
      if k == 10: return f"(__builtin_{r.choice(['fminf', 'fmaxf'])}({e()}, {e()}) + 0.0f)"
      if k == 11: return f"(float)({e('uint32')})"
      sgn = e()  # the sign of a NaN is not specified by C: only ordered values donate their sign
      return f"__builtin_copysignf({e()}, ({sgn}) != ({sgn}) ? 1.0f : ({sgn}))"
    if t == "half":   # each operation rounded to half on both sides (the host: -fexcess-precision=16); no division,
      k = r.randrange(6)   # which LLVM computes through an f32 reciprocal to within an ulp
      if k < 3: return f"({e()} {r.choice(['+', '-', '*'])} {e()})"
      if k == 3: return f"(_Float16)({e('float')})"
      if k == 4: return f"({e('int')} > {e('int')} ? {e()} : {e()})"
      return f"(_Float16)((float)({e()}) {r.choice(['<', '>', '=='])} (float)({e()}))"
    k = r.randrange(9)
    if k < 3: l, o, rr = e(), r.choice(['+', '-', '*']), e(); l, rr = self.keep(t, l, rr); return f"({l} {o} {rr})"
    if k == 3: l, rr = self.keep(t, e(), e()); return f"({l} / {rr})"
    if k == 4: return f"__builtin_fma({', '.join(self.keep(t, e(), e(), e()))})"
    if k == 5: return f"(double)({e('float')})"
    if k == 6: return f"(double)({e('int')})"
    if k == 7: return f"__builtin_{r.choice(['floor', 'trunc', 'fabs', 'sqrt'])}({e()})"
    return f"(double)({e('int64')})"

  def stmts(self, n: int, d: int = 0) -> list[str]:
    r, out = self.r, []
    for _ in range(n):
      k = r.randrange(10)
      t = r.choice(["int", "int", "float", "float", "double", "int64", "uint32"])
      if k < 5 or d > 1:
        out.append(f"{self.var(t)} = {self.expr(t)};")
      elif k < 7:
        body = self.stmts(2, d + 1)
        els = self.stmts(1, d + 1) if r.random() < 0.5 else []
        out.append(f"if ({self.expr('int')} & 1) {{ {' '.join(body)} }}" + (f" else {{ {' '.join(els)} }}" if els else ""))
      elif k < 9:
        self.n += 1
        i = f"i{self.n}"
        bound = r.choice(["(a & 7)", "(TID & 3) + 1", "5", "umod((uint32)b, 9u)"])
        out.append(f"for (int {i} = 0; {i} < {bound}; {i}++) {{ {' '.join(self.stmts(2, d + 1))} }}")
      else:
        out.append(f"{{ int w = 0; while (w < (({self.expr('int')}) & 3)) {{ {self.stmts(1, d + 1)[0]} w++; }} }}")
    return out

def kernel_source(seed: int, flush: bool = False) -> str:
  g = Gen(seed, flush)
  r = g.r
  # a third of the kernels read their inputs per workgroup, not per work-item: LLVM then computes on the scalar unit
  # (s_cselect, s_addc/s_subb, s_cmp, SALU float on gfx12, ...); a separate stream keeps the other seeds' kernels
  at = "(GRP * 37)" if random.Random(seed * 31 + 7).random() < 0.35 else "gid"
  decl = (f"int gid = GRP * WG + TID; int a = ii[{at}], b = ii[({at} * 7 + 3) % {N}]; float x = ff[{at}], y = ff[({at} + 5) % {N}]; "
          f"double p = dd[{at}]; int64 q = ll[{at}]; uint32 u = (uint32)ii[({at} + 1) % {N}]; _Float16 h = (_Float16)ff[({at} + 3) % {N}];")
  use_lds = r.random() < 0.6
  phases = []
  if use_lds:
    phases.append(g.stmts(3) + [f"lds_i[TID] = {g.expr('int')}; lds_f[TID] = {g.expr('float')};"])
    if r.random() < 0.5:  # LDS atomics in a phase of their own: they commute, and nothing reads until the barrier
      phases.append([f"AADD(&lds_i[(TID * 5) % WG], {g.expr('int')});"])
  g2 = Gen(seed * 7919 + 1, flush)
  body = g2.stmts(r.randrange(3, 7))
  if use_lds:
    body.insert(0, f"a = a + lds_i[(TID * 13 + {r.randrange(WG)}) % WG]; x = x * lds_f[(TID + {r.randrange(WG)}) % WG];")
  # 8- and 16-bit values through global memory and LDS (sign and zero extension, byte and short stores), from a
  # stream of their own so the rest of each kernel is what it was
  g3 = Gen(seed * 104729 + 5, flush)
  r3 = g3.r
  if use_lds:
    phases[0].append(f"lds_s[TID] = (short)({g3.expr('int')}); lds_b[TID] = (uchar)({g3.expr('int')});")
    body.insert(0, f"b = b ^ (lds_s[(TID * 5 + {r3.randrange(WG)}) % WG] * (int)lds_b[(TID + {r3.randrange(WG)}) % WG]);")
  body.insert(0, f"a = a + ss[(gid * {r3.choice([1, 3, 7])} + {r3.randrange(N)}) % {N}]; u = u + (uint32)(ushort)ss[({at} + 2) % {N}];")
  # a 32-int vector written and read at indices known only at run time (uniform and per-lane): LLVM keeps it in
  # VGPRs and indexes them (v_movrels/v_movreld on RDNA, s_set_gpr_idx_on on gfx942), from a stream of its own
  g5 = Gen(seed * 15485863 + 3, flush)
  if g5.r.random() < 0.4:
    n5 = g5.r.choice(["(a & 31)", "(TID & 7) + 20", "27", "(int)umod(u, 32u)"])
    body.append(f"{{ int32v vv; for (int k = 0; k < 32; k++) vv[k] = b + k * {g5.r.randrange(1, 9)}; "
                f"for (int k = 0; k < {n5}; k++) vv[(k * {g5.r.choice([1, 5, 7, 11])} + ({g5.expr('int')})) & 31] = "
                f"vv[({g5.expr('int')}) & 31] + {g5.expr('int')}; "
                f"a = a + vv[({g5.expr('int')}) & 31]; b = b ^ vv[(TID * 3) & 31]; }}")
  atom = []
  if r.random() < 0.5:
    atom.append(f"AADD(&acc[{r.randrange(4)}], {g2.expr('int')});")
    atom.append(f"{r.choice(['AMAX', 'AOR', 'AXOR'])}(&acc[4 + {r.randrange(4)}], {g2.expr('int')});")
  outs = [f"oi[gid * {NOUT} + {k}] = {g2.expr('int')};" for k in range(NOUT)] + \
         [f"of[gid * {NOUT} + {k}] = {g2.expr('float')};" for k in range(NOUT)] + \
         [f"od[gid * {NOUT} + 0] = {g2.expr('double')}; ol[gid * {NOUT} + 0] = {g2.expr('int64')};"] + \
         [f"os[gid * {NOUT} + {k}] = (short)({g3.expr('int')}); ob[gid * {NOUT} + {k}] = (uchar)({g3.expr('int')});" for k in range(2)]
  if not flush:   # half precision, from a stream of its own (the host rounds it in software, which FTZ/DAZ does not reach)
    g4 = Gen(seed * 1299709 + 11, flush)
    halves = [f"h = {g4.expr('half')};" for _ in range(3)]
    outs += halves + [f"os[gid * {NOUT} + 2] = h2s(h); os[gid * {NOUT} + 3] = h2s({g4.expr('half')});"]
  phases.append(body + atom + outs)
  src = f"KDEF(k{seed}) {{\n  LDS_DECL\n"
  src += "\n  SYNC\n".join(f"  PHASE({k}) {{ {decl}\n    " + "\n    ".join(ph) + "\n  }" for k, ph in enumerate(phases))
  return src + "\n}\n", len(phases)

def host_library(srcs: list[tuple[int, str, bool]], ftz: bool = False) -> ctypes.CDLL:
  """The kernels for the host; with ftz each runs with MXCSR FTZ|DAZ set (denormal results and inputs are zeros)."""
  need("gcc")
  text = ("#include <xmmintrin.h>\n" if ftz else "") + PRELUDE + "\n".join(s for _, s, _ in srcs)
  on, off = ("unsigned csr = _mm_getcsr(); _mm_setcsr(csr | 0x8040);", "_mm_setcsr(csr);") if ftz else ("", "")
  text += "\n" + "\n".join(
    f"void run_k{seed}(const int *ii, const float *ff, const double *dd, const int64_t *ll, int *oi, float *of, double *od, "
    f"int64_t *ol, int *acc, const short *ss, short *os, uchar *ob) {{ int lds_i[WG]; float lds_f[WG]; short lds_s[WG]; "
    f"uchar lds_b[WG]; {on} for (int g = 0; g < {GROUPS}; g++) for (int ph = 0; ph < {nph}; ph++) for (int t = 0; t < WG; t++) "
    f"k{seed}(ph, t, g, lds_i, lds_f, lds_s, lds_b, ii, ff, dd, ll, oi, of, od, ol, acc, ss, os, ob); {off} }}" for seed, _, nph in srcs)
  # -msse4.1: floor/ceil/trunc/rint become roundss, which honours DAZ (glibc's integer-bit versions do not);
  # -fno-math-errno: sqrt is sqrtsd alone, not sqrtsd then glibc's sqrt for a negative input (which ignores DAZ)
  # -frounding-math with ftz: the FP environment changes at run time, so gcc must not fold by IEEE's rules what FTZ|DAZ
  # change (x - y where it proved y is +0 is x, a denormal the run would flush: seed 7212 in flush mode)
  flags = ["-O1", *(["-msse4.1", "-frounding-math"] if ftz else []), "-fwrapv", "-ffp-contract=off", "-fno-builtin", "-fno-math-errno", "-fexcess-precision=16"]
  return host_so(text, flags, "host")

def inputs(seed: int, denormals: bool = False) -> list[np.ndarray]:
  """Kernel inputs; with denormals a fifth of the floats and doubles are denormal (the flush-mode variant)."""
  rng = np.random.default_rng(seed)
  ii = np.where(rng.random(N) < 0.5, rng.integers(-100, 100, N), rng.integers(-2**31, 2**31, N)).astype(np.int32)
  special = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-40, 3.4e38, 0.1], np.float32)
  ff = np.where(rng.random(N) < 0.15, rng.choice(special, N), (rng.standard_normal(N) * 10.0 ** rng.integers(-3, 4, N))).astype(np.float32)
  dd = np.where(rng.random(N) < 0.1, rng.choice(special.astype(np.float64), N), rng.standard_normal(N) * 1e3)
  ll = rng.integers(-2**62, 2**62, N, dtype=np.int64)
  if denormals:
    ff = np.where(rng.random(N) < 0.2, rng.standard_normal(N) * 1e-39, ff).astype(np.float32)
    dd = np.where(rng.random(N) < 0.2, rng.standard_normal(N) * 1e-309, dd)
  ss = np.where(rng.random(N) < 0.3, rng.choice(np.array([0, -1, 1, -32768, 32767, 255, 256], np.int16), N), rng.integers(-2**15, 2**15, N)).astype(np.int16)
  return [ii, ff, dd, ll, ss]

def same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """Bit equality, except: any NaN equals any NaN (C does not specify payloads), and +0 equals -0 (LLVM's backend
  folds 0 - x into -x, so the sign of a zero result is not a property of the source program)."""
  if a.dtype.kind == "f":
    u = f"u{a.itemsize}"
    return (a.view(u) == b.view(u)) | (np.isnan(a) & np.isnan(b)) | ((a == 0) & (b == 0))
  return a == b

TARGETS = [("gfx1100", ()), ("gfx1100", ("-mwavefrontsize64",)), ("gfx1201", ()), ("gfx942", ())]
FLAGS = ("-fwrapv", "-cl-fp32-correctly-rounded-divide-sqrt")

def batches():
  seeds = list(SEEDS)
  found = [s for s in FOUND if s not in seeds]
  return [seeds[k:k + BATCH] for k in range(0, len(seeds), BATCH)] + ([found] if found else [])

@pytest.mark.parametrize("target", TARGETS, ids=lambda t: t[0] + ("-w64" if t[1] else ""))
@pytest.mark.parametrize("batch", batches(), ids=lambda b: f"seeds{b[0]}-{b[-1]}")
def test_random_kernels(target, batch):
  run_batch(target, batch, FLAGS)

def run_batch(target, batch, flags: tuple[str, ...], ftz: bool = False, float_mode: int | None = None) -> None:
  """Compile a batch of random kernels for the target and the host, run both, require equal outputs. float_mode: the
  RSRC1.FLOAT_MODE clang must have chosen (checked, so the test proves the mode it means to)."""
  run_sources(target, [(s, *kernel_source(s, ftz)) for s in batch], flags, ftz, float_mode)

def run_sources(target, srcs: list[tuple[int, str, int]], flags: tuple[str, ...], ftz: bool = False, float_mode: int | None = None) -> None:
  """run_batch's work for given kernels: (seed, source of kernel k<seed>, its number of phases); the seed picks the inputs."""
  need("gcc", "clang-19", "ld.lld-19")
  mcpu, extra = target
  dev = compile_cl(PRELUDE + "\n".join(s for _, s, _ in srcs), mcpu, flags + extra)
  ks = kernels(dev)
  if float_mode is not None:
    modes = {(k.rsrc[0] >> 12) & 0xff for k in ks.values()}
    assert modes == {float_mode}, f"clang chose FLOAT_MODE {modes}, expected {float_mode:#x}"
  lib = host_library(srcs, ftz)
  bad = []
  for seed, src, _ in srcs:
    ins = inputs(seed, ftz)
    outs0 = [np.zeros(N * NOUT, np.int32), np.zeros(N * NOUT, np.float32), np.zeros(N * NOUT, np.float64),
             np.zeros(N * NOUT, np.int64), np.zeros(8, np.int32)]
    small0 = [np.full(N * NOUT, 0x5555, np.int16), np.full(N * NOUT, 0xaa, np.uint8)]   # what a store must not touch shows
    host, small = [o.copy() for o in outs0], [o.copy() for o in small0]
    args = lambda outs, sm: ins[:4] + outs + ins[4:] + sm   # the kernel's argument order
    getattr(lib, f"run_k{seed}")(*[a.ctypes.data_as(ctypes.c_void_p) for a in args(host, small)])
    res, got, _ = launch(ks[f"k{seed}"], mcpu, args(outs0, small0), (GROUPS, 1, 1), (WG, 1, 1), max_instructions=5_000_000)
    if not res.ok: bad.append(f"seed {seed}: {res.fault}"); continue
    for name, h, g in zip(("oi", "of", "od", "ol", "acc", "os", "ob"), host + small, got[4:9] + got[10:]):
      ok = same(h, g)
      if not ok.all():
        k = int(np.argmin(ok))
        bad.append(f"seed {seed} {name}[{k}]: host {h[k]!r} gpu {g[k]!r} ({(~ok).sum()} differ)")
        break
  assert not bad, "\n".join(bad)
