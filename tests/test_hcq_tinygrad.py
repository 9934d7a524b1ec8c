"""rawgpu as tinygrad's runtime (rawgpu.hcq.tinygrad) on the emulated boards: tinygrad renders and compiles the
kernels (its LLVM backend), rawgpu links, loads and launches them. Results are checked against numpy, and against
tinygrad's own PYTHON device (its uop interpreter) where numpy has no equal (its random numbers, a training run)."""
import ctypes.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
import numpy as np
import pytest
from rawgpu.errors import RawGPUError

from conftest import need_firmware, open_hcq_target

tinygrad = pytest.importorskip("tinygrad", reason="tinygrad 0.14.0 is not installed (the test extra installs it: pip install -e '.[test]')")
if not any(ctypes.util.find_library(n) for n in ("LLVM", "LLVM-19", "LLVM-20", "LLVM-18")):
  pytest.skip("tinygrad's LLVM backend needs libLLVM (Debian: llvm-19-dev; .ci/run installs it)", allow_module_level=True)
if not (shutil.which("ld.lld-19") or shutil.which("ld.lld")): pytest.skip("ld.lld is not installed (Debian: lld-19)", allow_module_level=True)

from tinygrad import Context, Tensor, TinyJit, dtypes, nn   # noqa: E402
from rawgpu.hcq import tinygrad as rg                      # noqa: E402

TARGETS = ["MOCKPCI+AMD::gfx1100", "MOCKPCI+AMD::gfx1201", "MOCKKFD+AMD::gfx942"]


@pytest.fixture(scope="module", autouse=True)
def environment():
  """tinygrad sets DEV in the environment when it picks a default device itself, and rawgpu reads DEV too: restored
  after. tinygrad folds some constants on its CPU device, which compiles C with $CC (default clang)."""
  mp = pytest.MonkeyPatch()
  mp.setenv("DEV", os.environ.get("DEV", ""))
  if not os.environ.get("DEV"): mp.delenv("DEV")
  if not shutil.which(os.environ.get("CC", "clang")) and shutil.which("clang-19"): mp.setenv("CC", "clang-19")
  yield
  mp.undo()


@pytest.fixture(scope="module", params=TARGETS)
def tg(request):
  """tinygrad's name for the open rawgpu device of this target; tests run inside Context(DEV=name)."""
  for dev in open_hcq_target(request.param):
    name = rg.register(dev, name="RG" + request.param.split("::")[1].upper())
    with Context(DEV=name, CACHELEVEL=0):   # CACHELEVEL=0: every kernel compiled here, none from tinygrad's disk cache
      yield name


RNG = np.random.default_rng(0)
A, B = RNG.standard_normal((7, 33)).astype(np.float32), RNG.standard_normal((7, 33)).astype(np.float32)
P = np.abs(A) + 0.5
IA, IB = RNG.integers(-1000, 1000, 64).astype(np.int32), RNG.integers(1, 50, 64).astype(np.int32)
H1, H2 = RNG.standard_normal((32, 32)).astype(np.float16), RNG.standard_normal((32, 32)).astype(np.float16)
Q, K, V = (RNG.standard_normal((2, 16, 32)).astype(np.float32) for _ in range(3))


def _attention(q, k, v):
  s = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
  s = np.exp(s - s.max(-1, keepdims=True))
  return (s / s.sum(-1, keepdims=True)) @ v


OPS = {   # name: (tinygrad, numpy)
  "add": (lambda: Tensor(A) + Tensor(B), lambda: A + B),
  "div": (lambda: Tensor(A) / Tensor(P), lambda: A / P),
  "exp_log_sqrt": (lambda: Tensor(A).exp() + Tensor(P).log() * Tensor(P).sqrt(), lambda: np.exp(A) + np.log(P) * np.sqrt(P)),
  "sin_tanh_sigmoid": (lambda: Tensor(A).sin() + Tensor(A).tanh() - Tensor(A).sigmoid(), lambda: np.sin(A) + np.tanh(A) - 1 / (1 + np.exp(-A))),
  "pow": (lambda: Tensor(P) ** 1.7, lambda: P ** 1.7),
  "where_floor": (lambda: (Tensor(A) > 0).where(Tensor(A * 3).floor(), Tensor(B)), lambda: np.where(A > 0, np.floor(A * 3), B)),
  "int_arith": (lambda: Tensor(IA) * 3 + Tensor(IA) // Tensor(IB) - Tensor(IA) % Tensor(IB), lambda: IA * 3 + IA // IB - IA % IB),
  "int_bits": (lambda: (Tensor(IA) & 0x3f) | (Tensor(IA) ^ Tensor(IB)), lambda: (IA & 0x3f) | (IA ^ IB)),
  "half": (lambda: (Tensor(A).half() * Tensor(B).half()).float(), lambda: (A.astype(np.float16) * B.astype(np.float16)).astype(np.float32)),
  "uint8_cast": (lambda: Tensor(IA).cast(dtypes.uint8).cast(dtypes.int32), lambda: IA.astype(np.uint8).astype(np.int32)),
  "sum_max_mean": (lambda: Tensor(A).sum(axis=1) + Tensor(A).max(axis=1) + Tensor(A).mean(axis=1), lambda: A.sum(1) + A.max(1) + A.mean(1)),
  "argmax": (lambda: Tensor(A).argmax(axis=1), lambda: A.argmax(1)),
  "cumsum": (lambda: Tensor(A).cumsum(axis=1), lambda: A.cumsum(1)),
  "large_sum": (lambda: (Tensor(np.arange(100_000, dtype=np.float32)) * 2).sum(), lambda: np.float32(99_999 * 100_000)),
  "matmul_odd": (lambda: Tensor(A) @ Tensor(B.T.copy()), lambda: A @ B.T),
  "matmul_batched": (lambda: Tensor(A[:4, :32].reshape(4, 4, 8)) @ Tensor(B[:4, :32].reshape(4, 8, 4)),
                     lambda: A[:4, :32].reshape(4, 4, 8) @ B[:4, :32].reshape(4, 8, 4)),
  "matmul_half": (lambda: Tensor(H1).matmul(Tensor(H2), dtype=dtypes.float), lambda: H1.astype(np.float32) @ H2.astype(np.float32)),
  "log_softmax": (lambda: Tensor(A).log_softmax(axis=1), lambda: A - A.max(1, keepdims=True) - np.log(np.exp(A - A.max(1, keepdims=True)).sum(1, keepdims=True))),
  "gather": (lambda: Tensor(A)[Tensor(np.array([3, 0, 6], dtype=np.int32))], lambda: A[[3, 0, 6]]),
  "attention": (lambda: Tensor(Q).scaled_dot_product_attention(Tensor(K), Tensor(V)), lambda: _attention(Q, K, V)),
}


@pytest.mark.parametrize("op", OPS)
def test_tensor_ops_match_numpy(tg, op):
  run, ref = OPS[op]
  got, want = run().numpy(), ref()
  assert got.shape == np.shape(want)
  np.testing.assert_allclose(got, want, rtol=2e-3, atol=2e-3)


def test_half_matmul_runs_on_the_tensor_cores(tg, monkeypatch, tmp_path):
  """tinygrad's tensor-core kernel (WMMA on RDNA3/4, MFMA on CDNA3, as llvm-objdump reads the code rawgpu loaded)
  gives numpy's product."""
  if not shutil.which("llvm-objdump-19"): pytest.skip("llvm-objdump-19 is not installed (Debian: llvm-19)")
  loaded, real = [], rg.link
  monkeypatch.setattr(rg, "link", lambda obj, name: loaded.append(code := real(obj, name)) or code)
  h = RNG.standard_normal((48, 32)).astype(np.float16)   # a shape no other test uses: tinygrad loads each kernel once
  got = Tensor(h).matmul(Tensor(h.T.copy()), dtype=dtypes.float).numpy()
  np.testing.assert_allclose(got, h.astype(np.float32) @ h.T.astype(np.float32), rtol=2e-3, atol=2e-3)
  assert loaded, "no kernel was loaded"
  text = ""
  for i, code in enumerate(loaded):
    (path := tmp_path / f"kernel{i}.so").write_bytes(code)
    text += subprocess.run(["llvm-objdump-19", "-d", str(path)], capture_output=True, text=True, check=True).stdout
  assert ("v_mfma_f32_16x16x16" if "GFX942" in tg else "v_wmma_f32_16x16x16_f16") in text


def test_jit_replays_with_new_inputs(tg):
  @TinyJit
  def f(u, v): return (u * v + 1).realize()
  for i in range(5):   # the first calls capture, the rest replay the captured kernels on the new buffers
    np.testing.assert_allclose(f(Tensor(A + i), Tensor(B)).numpy(), (A + i) * B + 1, rtol=1e-6, atol=1e-6)   # atol: the kernel fuses to one fma


def test_jit_batches_replay_as_rawgpu_graphs(tg, monkeypatch):
  """TinyJit's batch of kernels becomes one rawgpu Graph; each call patches the new input buffers and the bound
  variable into it and replays it."""
  from tinygrad import Variable
  from rawgpu.hcq.graph import Graph
  replays = []
  real = Graph.replay
  monkeypatch.setattr(Graph, "replay", lambda self, **inputs: replays.append(sorted(inputs)) or real(self, **inputs))
  @TinyJit
  def f(u, v, n):
    x = (u * v + n).contiguous()
    y = (x.exp() * 2).contiguous()
    return (y.sum(axis=1) + x.max(axis=1)).realize()
  for i in range(5):
    x = (A + i) * B + i
    got = f(Tensor(A + i), Tensor(B), Variable("n", 0, 10).bind(i)).numpy()
    np.testing.assert_allclose(got, (np.exp(x) * 2).sum(1) + x.max(1), rtol=1e-4)
  assert len(replays) == 4 and replays[0] == ["in0.0", "in1.0", "var:n"]   # the capture's own run and three calls after it
  from tinygrad.helpers import GlobalCounters
  GlobalCounters.reset()
  with Context(DEBUG=2): f(Tensor(A), Tensor(B), Variable("n", 0, 10).bind(1))   # DEBUG=2 waits and reports each call's GPU time
  assert len(replays) == 5 and GlobalCounters.time_sum_s > 0


def test_jit_kernels_whose_grid_follows_a_variable_replay_in_the_graph(tg, monkeypatch):
  """Attention over the first n rows of a cache (a KV cache's shape): the kernels' grids depend on n. They replay
  in the rawgpu Graph too, their launch dimensions patched from n at each call, and no kernel is launched alone."""
  from tinygrad import Variable
  from rawgpu.hcq.amd.program import AMDProgram
  from rawgpu.hcq.graph import Graph
  replays, single = [], []
  real_replay, real_call = Graph.replay, AMDProgram.__call__
  monkeypatch.setattr(Graph, "replay", lambda self, **inputs: replays.append(inputs) or real_replay(self, **inputs))
  monkeypatch.setattr(AMDProgram, "__call__", lambda self, *a, **kw: single.append(self.name) or real_call(self, *a, **kw))
  K, V, q = (RNG.standard_normal(s).astype(np.float32) for s in ((16, 8), (16, 8), (1, 8)))
  kc, vc = Tensor(K).realize(), Tensor(V).realize()
  @TinyJit
  def f(q, n): return ((q @ kc[:n].T) / 4).softmax() @ vc[:n]
  for i in (1, 2, 3, 9, 16, 5):
    got = f(Tensor(q), Variable("n", 1, 16).bind(i)).numpy()
    s = q @ K[:i].T / 4
    w = np.exp(s - s.max())
    np.testing.assert_allclose(got, (w / w.sum()) @ V[:i], rtol=1e-5, atol=1e-6)
    if i == 2: single.clear()   # captured: from here on, the graph alone
  dims = [{k: v for k, v in r.items() if k.startswith("dim")} for r in replays]
  assert dims and all(dims) and len({tuple(sorted(d.items())) for d in dims}) == len(dims)   # every call a new grid
  assert not single, single


def test_a_kernel_past_tinygrads_timeout_is_stopped_where_the_device_recovers(tg, monkeypatch):
  """BEAM's early stop: a launch that waits with tinygrad's timeout (ms) is stopped when it runs longer, on a device
  that recovers in place (AM on MOCKPCI), with the RuntimeError tinygrad's search expects; KFD runs it to its end.
  The device goes on either way."""
  import time
  from tinygrad import Device
  P = Device[tg].runtime_t   # rawgpu.hcq.tinygrad's Program
  calls, real = [], P.__call__
  monkeypatch.setattr(P, "__call__", lambda self, *b, **kw: calls.append((self, b, kw)) or real(self, *b, **kw))
  M = RNG.standard_normal((64, 64)).astype(np.float32)
  a = Tensor(M).realize()
  (a @ a).realize()
  prg, bufs, kw = calls[-1]   # the matmul
  kw = {k: v for k, v in kw.items() if k not in ("wait", "timeout")}
  t0 = time.monotonic()
  gpu = prg(*bufs, **kw, wait=True)
  whole = time.monotonic() - t0
  assert gpu > 0.005   # the emulated matmul runs for milliseconds: a 1 ms timeout cuts it short
  if Device[tg].rg.recovers_in_place:
    t0 = time.monotonic()
    with pytest.raises(RuntimeError, match=f"{prg.name} on {tg} ran past tinygrad's timeout of 1 ms: stopped"): prg(*bufs, **kw, wait=True, timeout=1)
    assert time.monotonic() - t0 < whole / 2
    early = (a @ a * 3).realize()   # queued before it and not waited for, as tinygrad runs: not stopped with it
    with pytest.raises(RuntimeError, match="ran past tinygrad's timeout"): prg(*bufs, **kw, wait=True, timeout=1)
    np.testing.assert_allclose(early.numpy(), M @ M * 3, rtol=1e-4, atol=1e-4)
  else:
    t0 = time.monotonic()
    assert prg(*bufs, **kw, wait=True, timeout=1) > 0.005   # ignored: it ran to its end
  for t in (0, None): assert prg(*bufs, **kw, wait=True, timeout=t) > 0.005   # tinygrad's "no timeout"
  np.testing.assert_allclose((a @ a + 1).numpy(), M @ M + 1, rtol=1e-4, atol=1e-4)


def _on_python_device(fn):
  """fn's result computed by tinygrad's PYTHON device (its interpreter of the same kernels' uops)."""
  with Context(DEV="PYTHON"): return fn()


def test_random_numbers_match_tinygrad_python_device(tg):
  """tinygrad's threefry generator is integer math on the device: the same bits as its interpreter gives."""
  def draw():
    Tensor.manual_seed(42)
    return Tensor.rand(300).numpy()
  assert np.array_equal(draw(), _on_python_device(draw))


def _train(steps: int = 3):
  """A small CNN's SGD steps under TinyJit: the losses and the trained weights."""
  rng = np.random.default_rng(1)
  class Net:
    def __init__(self): self.c1, self.l1 = nn.Conv2d(1, 4, 3), nn.Linear(4 * 6 * 6, 10)
    def __call__(self, x): return self.l1(self.c1(x).relu().max_pool2d(2).flatten(1))
  Tensor.manual_seed(0)
  net = Net()
  opt = nn.optim.SGD(nn.state.get_parameters(net), lr=0.1)
  X, Y = Tensor(rng.standard_normal((8, 1, 14, 14)).astype(np.float32)), Tensor(rng.integers(0, 10, 8).astype(np.int32))
  @TinyJit
  def step():
    with Context(TRAINING=1):
      opt.zero_grad()
      loss = net(X).sparse_categorical_crossentropy(Y)
      loss.backward()
      opt.step()
      return loss.realize()
  return [step().item() for _ in range(steps)], net.c1.weight.numpy(), net.l1.weight.numpy()


_REFERENCE: list = []

def test_training_matches_tinygrad_python_device(tg):
  if not _REFERENCE: _REFERENCE.append(_on_python_device(_train))
  losses, conv, lin = _train()
  want_losses, want_conv, want_lin = _REFERENCE[0]
  assert losses[-1] < losses[0]   # it learns
  np.testing.assert_allclose(losses, want_losses, rtol=1e-5)
  np.testing.assert_allclose(conv, want_conv, rtol=1e-4, atol=1e-6)
  np.testing.assert_allclose(lin, want_lin, rtol=1e-4, atol=1e-6)


@pytest.fixture(scope="module")
def tg_pair():
  """tinygrad's RGPAIR and RGPAIR:1: two emulated boards on one PCI bus. Boards 3 and 4: the tg fixture's board 0
  may still be open (a module fixture lives until its module ends, past its last test) and RGWAIT takes board 2."""
  from rawgpu.hcq.device import Device
  need_firmware()
  a = Device("MOCKPCI:3+AMD::gfx1100")
  try:
    b = Device("MOCKPCI:4+AMD::gfx1100")
    try:
      with Context(CACHELEVEL=0): yield rg.register(a, b, name="RGPAIR"), (a, b)
    finally: b.close()
  finally: a.close()


def test_copies_between_devices_use_the_copy_engine(tg_pair, monkeypatch):
  """A tensor moved to the other board is copied by that board's copy engine from the source's mapped VRAM; a
  tensor sharded over both boards computes each half where it lies."""
  from rawgpu.hcq.device import Device
  name, (a, b) = tg_pair
  transfers = []
  real = Device.transfer
  monkeypatch.setattr(Device, "transfer", lambda self, dst, src, size=None: transfers.append((self, src.dev)) or real(self, dst, src, size))
  moved = (Tensor(A, device=name) * 2).to(f"{name}:1")
  np.testing.assert_allclose((moved + 1).numpy(), A * 2 + 1, rtol=1e-6)
  assert (b, a) in transfers
  with Context(DEV=name):
    a6, b6 = A[:6], B[:6]   # an even split: 3 rows a board
    s = Tensor(a6).shard((name, f"{name}:1"), axis=0)
    np.testing.assert_allclose((s * Tensor(b6).shard((name, f"{name}:1"), axis=0)).sum(axis=1).numpy(), (a6 * b6).sum(1), rtol=1e-5, atol=1e-6)


def test_jit_of_a_sharded_model_replays_as_one_graph_over_both_boards(tg_pair, monkeypatch):
  """TinyJit over a tensor sharded across both boards (a data-parallel linear layer whose sum over the batch needs
  an all-reduce): the kernels of both boards and the copies between them are one rawgpu Graph, each queue waiting
  only where tinygrad's dependencies say. After the capture nothing runs outside it; results match numpy."""
  from rawgpu.hcq.amd.program import AMDProgram
  from rawgpu.hcq.device import Device
  from rawgpu.hcq.graph import Graph
  name, (a, b) = tg_pair
  devs = (name, f"{name}:1")
  graphs, outside = [], []
  real_replay, real_call, real_transfer = Graph.replay, AMDProgram.__call__, Device.transfer
  monkeypatch.setattr(Graph, "replay", lambda self, **kw: graphs.append(self) or real_replay(self, **kw))
  monkeypatch.setattr(AMDProgram, "__call__", lambda self, *x, **kw: outside.append(self.name) or real_call(self, *x, **kw))
  monkeypatch.setattr(Device, "transfer", lambda self, *x, **kw: outside.append("transfer") or real_transfer(self, *x, **kw))
  W = RNG.standard_normal((33, 5)).astype(np.float32)
  w = Tensor(W, device=name).shard(devs).realize()   # replicated on both
  @TinyJit
  def f(x): return ((x @ w).relu().sum(axis=0) * 0.5).realize()
  for i in range(4):
    X = (A[:6] + i).astype(np.float32)
    x = Tensor(X, device=name).shard(devs, axis=0).realize()
    outside.clear()
    out = f(x)
    if i >= 2: assert not outside, outside   # captured: the call is the graph's replay alone
    np.testing.assert_allclose(out.numpy(), np.maximum(X @ W, 0).sum(0) * 0.5, rtol=1e-5, atol=1e-5)
  assert len(graphs) == 3 and all(set(g.devices) == {a, b} and not g.ordered for g in graphs)
  assert any(k == "copy" for k, _ in graphs[-1].nodes), "the all-reduce's copies are in the graph"


def test_jit_graph_over_two_boards_waits_for_its_input_still_being_computed(tg_pair):
  """The jit's input is computed on one board just before the call (queued, not waited for); the graph copies it
  to the other board, whose copy engine must wait for that work first."""
  name, _ = tg_pair
  M = RNG.standard_normal((48, 48)).astype(np.float32)
  m = Tensor(M, device=name).realize()
  @TinyJit
  def f(x): return (x.to(f"{name}:1") * 2 + 1).realize()
  for i in range(4):
    x = ((m + i) @ m).realize()   # still running on the first board when the graph replays
    np.testing.assert_allclose(f(x).numpy(), ((M + i) @ M) * 2 + 1, rtol=1e-4, atol=1e-3)


def test_copies_between_devices_that_cannot_map_each_other_go_through_the_host_with_a_warning():
  kfd = open_hcq_target("MOCKKFD+AMD::gfx1201")
  pci = open_hcq_target("MOCKPCI:2+AMD::gfx1201")   # boards the module's other fixtures do not hold
  a, b = next(pci), next(kfd)
  try:
    name = rg.register(a, b, name="RGMIX")
    with pytest.warns(RuntimeWarning, match="RGMIX to RGMIX:1 go through the host: .*same interface"):
      moved = (Tensor(A, device=name) - 1).to(f"{name}:1").realize()
    np.testing.assert_allclose(moved.numpy(), A - 1, rtol=1e-6)
  finally:
    for gen in (pci, kfd): next(gen, None)


class _Block:
  """A pre-norm transformer block: causal attention over 4 heads, a SwiGLU MLP."""
  def __init__(self, d: int, hidden: int, heads: int = 4):
    self.n1, self.n2, self.heads = nn.RMSNorm(d), nn.RMSNorm(d), heads
    self.qkv, self.o = nn.Linear(d, 3 * d, bias=False), nn.Linear(d, d, bias=False)
    self.w1, self.w2, self.w3 = nn.Linear(d, hidden, bias=False), nn.Linear(hidden, d, bias=False), nn.Linear(d, hidden, bias=False)
  def __call__(self, x):
    b, t, d = x.shape
    q, k, v = self.qkv(self.n1(x)).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
    x = x + self.o(q.scaled_dot_product_attention(k, v, is_causal=True).transpose(1, 2).reshape(b, t, d))
    return x + self.w2(self.w1(self.n2(x)).silu() * self.w3(self.n2(x)))


def test_every_kernel_of_a_transformer_step_matches_tinygrads_cpu_device(tg):
  """tinygrad's VALIDATE_WITH_CPU: each kernel of a 2-block transformer's initialisation, forward and backward (a few
  hundred) also runs on tinygrad's CPU device (the same kernel compiled with clang for the host) on copies of its
  inputs, and its outputs must agree (tinygrad's tolerance, 1e-3)."""
  if not shutil.which(os.environ.get("CC", "clang")): pytest.skip("tinygrad's CPU device needs a C compiler: clang or clang-19")
  from tinygrad.helpers import GlobalCounters
  with Context(VALIDATE_WITH_CPU=1):
    Tensor.manual_seed(0)
    emb, blocks, head = nn.Embedding(64, 32), [_Block(32, 64) for _ in range(2)], nn.Linear(32, 64)
    toks = Tensor([[1, 7, 3, 9, 22, 5, 0, 11]], dtype=dtypes.int32)
    GlobalCounters.reset()
    x = emb(toks)
    for blk in blocks: x = blk(x)
    logp = head(x).log_softmax(-1)
    loss = -logp[0, :-1].gather(1, toks[0, 1:].reshape(-1, 1)).mean()
    loss.backward()
    grad = head.weight.grad.numpy()
  assert GlobalCounters.kernel_count > 200 and np.isfinite(loss.item()) and grad.std() > 0


def test_a_name_tinygrad_opened_already_is_refused(tg):
  (Tensor(A, device=tg) + 1).realize()
  with pytest.raises(RawGPUError, match=f"tinygrad device {tg} is open already.*register another name"): rg.register("MOCKPCI+AMD", name=tg)


def test_a_device_index_past_the_registered_ones_is_a_clear_error(tg):
  with pytest.raises(RawGPUError, match=r"has 1 rawgpu device\(s\).*give register\(\) more specs"):
    (Tensor(A, device=f"{tg}:1") + 1).numpy()
  for bad in ("-1", "abc"):   # (-1 opened the last spec again: "already open"; abc was int()'s ValueError)
    with pytest.raises(RawGPUError, match="the index after ':' must be 0, 1, ..."): (Tensor(A, device=f"{tg}:{bad}") + 1).numpy()


def test_a_device_waits_as_long_as_tinygrads_own():
  """One kernel of millions of workgroups runs for tens of seconds on an emulated board: tinygrad's own devices allow
  30 s without progress (HCQDEV_WAIT_TIMEOUT_MS), and so does the device register() opens (it timed out after 10 s)."""
  need_firmware()
  from tinygrad import Device
  name = rg.register("MOCKPCI:2+AMD", name="RGWAIT")
  try: assert Device[name].rg.timeout_ms == 30_000
  finally: Device[name].finalize()


def test_register_without_specs_takes_dev_as_it_is_then(monkeypatch):
  """tinygrad writes its own default device into DEV once it runs (DEV=CPU), and DEV=RAWGPU names the device register()
  makes: register() alone read DEV only when tinygrad first opened the device, and failed on those."""
  for value, why in ((None, "DEV is not set"), ("CPU", "unknown vendor 'CPU'"), ("RAWGPU", "unknown vendor 'RAWGPU'")):
    if value is None: monkeypatch.delenv("DEV", raising=False)
    else: monkeypatch.setenv("DEV", value)
    with pytest.raises(RawGPUError, match=f"register\\(\\) without specs opens rawgpu's DEV.*{why}"): rg.register(name="RGDEF")
  monkeypatch.setenv("DEV", "MOCKPCI+AMD::gfx1201")
  rg.register(name="RGDEF")
  import sys as _sys
  assert _sys.modules["tinygrad.runtime.ops_rgdef"].RgdefDevice.SPECS == ("MOCKPCI+AMD::gfx1201",)


# ---- tinygrad's own tests

TINYGRAD_TESTS = Path(os.environ.get("RAWGPU_CACHE", Path.home() / ".cache" / "rawgpu")) / f"tinygrad-{rg.TINYGRAD_VERSION}" / "test"
_RUN_TINY = """
import json, sys, unittest
from rawgpu.hcq import tinygrad as rg
rg.register(sys.argv[1])
res = unittest.TestResult()
unittest.defaultTestLoader.loadTestsFromName("test_tiny").run(res)
print(json.dumps({"run": res.testsRun, "failed": [(str(t), tb[-3000:]) for t, tb in res.failures + res.errors],
                  "skipped": [(str(t), why) for t, why in res.skipped]}))
"""


@pytest.mark.parametrize("spec", TARGETS)
def test_tinygrads_device_smoke_test_passes(spec):
  """tinygrad's test/test_tiny.py (its self-contained checks of a device: copies, elementwise, gemm and hgemm, random
  numbers, TinyJit, BEAM search, symbolic shapes, an MNIST model forward and backward) with rawgpu as the default
  device, in a process of its own (tinygrad takes its default device from DEV)."""
  if not (TINYGRAD_TESTS / "test_tiny.py").is_file(): pytest.skip(f"tinygrad's tests are not fetched into {TINYGRAD_TESTS}: run .ci/fetch-tinygrad-tests")
  need_firmware()
  env = {**os.environ, "DEV": "RAWGPU", "PYTHONPATH": str(TINYGRAD_TESTS)}
  if spec.endswith("gfx942"): env["RAWGPU_AM_IN_PROGRESS"] = "1"
  if not shutil.which(env.get("CC", "clang")):   # tinygrad folds some constants on its CPU device, which compiles C
    if not shutil.which("clang-19"): pytest.skip("tinygrad's CPU device needs a C compiler: clang or clang-19")
    env["CC"] = "clang-19"
  r = subprocess.run([sys.executable, "-c", _RUN_TINY, spec], cwd=TINYGRAD_TESTS, env=env, capture_output=True, text=True, timeout=900)
  assert r.returncode == 0 and r.stdout.strip(), r.stderr[-3000:]
  res = json.loads(r.stdout.strip().splitlines()[-1])
  assert res["failed"] == [], "\n\n".join(f"{t}:\n{tb}" for t, tb in res["failed"])
  assert res["run"] >= 20 and all("only supported on CL" in why for _, why in res["skipped"]), res["skipped"]


_CLI = "import sys; from rawgpu.tools.cli import main; sys.exit(main(sys.argv[1:]))"


def test_rawgpu_tinygrad_runs_a_script_unchanged_on_rawgpus_device(tmp_path):
  need_firmware()
  script = tmp_path / "double.py"
  script.write_text("import sys\nfrom tinygrad import Tensor, Device\nx = (Tensor([1.0, 2.0, 3.0]) * float(sys.argv[1])).tolist()\n"
                    "print(Device.DEFAULT, x)\nsys.exit(3)\n")
  r = subprocess.run([sys.executable, "-c", _CLI, "tinygrad", "--dev", "MOCKPCI+AMD::gfx1201", str(script), "2"],
                     capture_output=True, text=True, timeout=300)
  assert r.returncode == 3, r.stderr[-2000:]   # the script's exit status
  assert r.stdout.strip() == "RAWGPU [2.0, 4.0, 6.0]"
  assert "rawgpu tinygrad: RAWGPU is MOCKPCI+AMD:gfx1201@0000:c1:00.0 (emulated GPU, not real hardware)" in r.stderr, r.stderr[-2000:]
  (tmp_path / "says.py").write_text("import sys\nsys.exit('a message')\n")   # Python prints the message and exits 1
  r = subprocess.run([sys.executable, "-c", _CLI, "tinygrad", "--dev", "MOCKPCI+AMD", str(tmp_path / "says.py")], capture_output=True, text=True, timeout=300)
  assert r.returncode == 1 and r.stderr.strip().endswith("a message"), r.stderr[-2000:]
  r = subprocess.run([sys.executable, "-c", _CLI, "tinygrad", str(tmp_path / "missing.py")], capture_output=True, text=True, timeout=60)
  assert r.returncode == 1 and "rawgpu: error: no such script" in r.stderr and "RAWGPU is" not in r.stderr   # before a boot


# ---- errors without a device

def test_another_tinygrad_version_is_refused_with_the_reason(monkeypatch):
  import importlib.metadata
  monkeypatch.setattr(importlib.metadata, "version", lambda pkg: "0.13.0")
  with pytest.raises(RawGPUError, match=r"tinygrad 0\.13\.0 is installed.*pip install tinygrad==0\.14\.0"):
    rg.register("MOCKPCI+AMD", name="RGOLD")


@pytest.mark.parametrize("name", ["rawgpu", "RG-1", "1RG", ""])
def test_a_bad_device_name_is_refused(name):
  with pytest.raises(RawGPUError, match="capital letters and digits"): rg.register("MOCKPCI+AMD", name=name)


def test_a_kernel_that_does_not_link_is_a_clear_error():
  bad = b"\x7fELF\x02\x01\x01" + bytes(9) + (1).to_bytes(2, "little") + bytes(46)   # ET_REL, nothing valid after
  with pytest.raises(RawGPUError, match="linking tinygrad kernel E_1 failed"): rg.link(bad, "E_1")


def test_a_missing_linker_is_a_clear_error(monkeypatch):
  monkeypatch.setenv("RAWGPU_LLD", "/nonexistent/ld.lld")
  rel = b"\x7fELF\x02\x01\x01" + bytes(9) + (1).to_bytes(2, "little") + bytes(46)
  with pytest.raises(RawGPUError, match="cannot run /nonexistent/ld.lld"): rg.link(rel, "E_1")
  monkeypatch.delenv("RAWGPU_LLD")
  monkeypatch.setenv("PATH", "/nonexistent")
  with pytest.raises(RawGPUError, match="no ld.lld was found.*lld-19"): rg.link(rel, "E_1")


def test_a_linked_code_object_is_loaded_as_it_is():
  from rawgpu import kernels
  code = kernels.path("gfx1100", "fill").read_bytes()
  assert rg.link(code, "fill") is code


def test_a_dropped_jit_frees_its_graph(tg):
  """TinyJits made and dropped (as a script that builds one per shape does): their rawgpu Graphs, kernel arguments
  and commands go with them; the device's allocations stay as they were."""
  import gc
  from tinygrad import Device
  from rawgpu.hcq.graph import Graph
  dev = Device[tg].rg
  x = Tensor(A[:, :7].copy()).realize()
  def run_a_jit() -> tuple[np.ndarray, int]:
    @TinyJit
    def f(t):
      a = (t @ t).relu().contiguous()
      b = (a @ t).exp2().contiguous()
      return ((b @ a).sum(axis=0) + a.max(axis=1)).realize()
    for _ in range(4): out = f(x)
    return out.numpy(), sum(isinstance(o, Graph) for o in gc.get_objects())
  want, graphs = run_a_jit()
  assert graphs >= 1   # the jit replays through a graph
  gc.collect(); dev.synchronize()
  before = len(dev.iface.mems)
  for _ in range(5): np.testing.assert_allclose(run_a_jit()[0], want, rtol=1e-5)
  gc.collect(); dev.synchronize()
  assert len(dev.iface.mems) == before and not any(isinstance(o, Graph) for o in gc.get_objects())
