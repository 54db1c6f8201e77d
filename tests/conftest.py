"""Shared fixtures. Goldens are rewritten with ATTNDSL_UPDATE_GOLDEN=1 (then review the diff)."""

from __future__ import annotations

import importlib
import os
import pkgutil
import sys
from pathlib import Path

# one worker per core, one thread each: pytest-xdist's workers inherit this environment from
# the process that starts them, and OpenBLAS (NumPy's) and OpenMP (torch's) read it when they
# load; a pool of two threads in each worker spins on the core the other worker uses (on 2
# cores the suite took 6:53 so, 5:43 on one thread each and a smaller Mamba example)
for _pool in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_pool, "1")

import pytest  # noqa: E402  (the thread counts first)
from hypothesis import settings  # noqa: E402

import attndsl  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):  # one worker per core: one thread each
    import onnxruntime as _ort

    _session_init = _ort.InferenceSession.__init__

    def _one_thread(self, model, sess_options=None, *args, **kwargs):
        """Sessions without a thread count run on one (ONNX Runtime's default, one per core,
        spins on cores the other workers use); a count a test asks for is kept."""
        options = sess_options if sess_options is not None else _ort.SessionOptions()
        if options.intra_op_num_threads == 0:
            options.intra_op_num_threads = 1
        _session_init(self, model, options, *args, **kwargs)

    _ort.InferenceSession.__init__ = _one_thread

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.attn"))
UPDATE = bool(os.environ.get("ATTNDSL_UPDATE_GOLDEN"))


@pytest.fixture(autouse=True)
def _in_root(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run from the repository root so paths in diagnostics are stable."""
    monkeypatch.chdir(ROOT)


@pytest.fixture(autouse=True)
def _torch_threads():
    """torch's thread count as the test found it: `bench --decode` sets it (2 by default) for
    its transformers run, and a worker left with two threads beside the other worker's on two
    cores slows both (each worker runs one: above)."""
    torch = sys.modules.get("torch")
    threads = torch.get_num_threads() if torch else None
    yield
    if threads and torch.get_num_threads() != threads:
        torch.set_num_threads(threads)


_REGISTRIES: dict = {}
SHARE_REGISTRY = [True]  # False: torch.onnx.export builds its own table (fresh_exports)


def _share_onnx_registry() -> None:
    """torch.onnx.export (the portable target) rebuilds its table of ONNX Script functions on
    every call, parsing each function's source again: about a third of an export's time. The
    table depends only on the opset and the installed packages, so each process builds it once
    and every export gets its own copy (fresh lists: nothing one export registers reaches
    another). Same table, same bytes: test_export compares an export with and without it."""
    from torch.onnx._internal.exporter import _registration

    cls = _registration.ONNXRegistry
    if "_unshared_from_torchlib" in cls.__dict__:
        return
    build = cls.from_torchlib  # the classmethod, bound

    def from_torchlib(opset_version=None):
        args = () if opset_version is None else (opset_version,)
        if not SHARE_REGISTRY[0]:
            return build(*args)
        if args not in _REGISTRIES:
            _REGISTRIES[args] = build(*args)
        copy = cls()
        copy.__dict__.update(_REGISTRIES[args].__dict__)
        copy.functions = {k: list(v) for k, v in _REGISTRIES[args].functions.items()}
        return copy

    cls._unshared_from_torchlib = build
    cls.from_torchlib = staticmethod(from_torchlib)


@pytest.fixture(autouse=True)
def _shared_onnx_registry(request: pytest.FixtureRequest):
    """Every test shares the exporter's table (`_share_onnx_registry`) but one marked
    `fresh_exports`."""
    _share_onnx_registry()
    SHARE_REGISTRY[0] = not request.node.get_closest_marker("fresh_exports")
    yield
    SHARE_REGISTRY[0] = True


_EXPORTS: dict = {}


@pytest.fixture
def shared_exports(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    """The sweeps over every example layer export each (spec, target, seed, dtype) once per
    session and share it: `Layer.onnx_model` without a weights file returns the first export
    of the same arguments. Same inputs give the same bytes (tested afresh, without this
    fixture, by the byte-identity tests), so sharing changes no result. A test marked
    `fresh_exports` builds its own."""
    if request.node.get_closest_marker("fresh_exports"):
        return
    real = attndsl.Layer.onnx_model

    def onnx_model(self, *, target: str = "ort-cpu", seed: int = 0, weights=None,
                   dtype: str = "float32", quantize=None):
        if weights is not None:
            return real(self, target=target, seed=seed, weights=weights, dtype=dtype,
                        quantize=quantize)
        key = (self.spec, target, seed, dtype, quantize)
        if key not in _EXPORTS:
            _EXPORTS[key] = real(self, target=target, seed=seed, dtype=dtype,
                                 quantize=quantize)
        return _EXPORTS[key]

    monkeypatch.setattr(attndsl.Layer, "onnx_model", onnx_model)


def refused_at(text: str, words: str) -> int:
    """The line of the first diagnostic whose message holds `words`, checking `text` (which
    must be refused)."""
    from attndsl.errors import SpecError

    with pytest.raises(SpecError) as err:
        attndsl.loads(text, "refused.attn")
    found = [d for d in err.value.diagnostics if words in d.message]
    assert found, [d.message for d in err.value.diagnostics]
    return found[0].span.source.line_col(found[0].span.start)[0]


def refused_where(text: str, words: str, at: str) -> None:
    """Checking `text` fails, its first diagnostic holds `words` and points where `at` begins."""
    from attndsl.errors import SpecError

    with pytest.raises(SpecError) as err:
        attndsl.loads(text, "t.attn")
    d = err.value.diagnostics[0]
    assert words in d.message, d.message
    assert text[d.span.start:].startswith(at), (text[d.span.start:][:30], words)


def golden(path: Path, actual: str) -> None:
    if UPDATE or not path.exists():
        if not UPDATE:
            raise AssertionError(f"missing golden {path}; run with ATTNDSL_UPDATE_GOLDEN=1")
        path.write_text(actual)
    assert actual == path.read_text(), f"output differs from golden {path.name}"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--deep", action="store_true",
                     help="the long property runs: thousands of random specs and fuzz inputs; "
                     "every generation family on both targets")
    parser.addoption("--deep-count", type=int, default=2000,
                     help="random specs checked with --deep (default 2000)")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """`spec_seed`: 24 random specs by default, --deep-count (2000) with --deep."""
    if "spec_seed" in metafunc.fixturenames:
        deep = metafunc.config.getoption("--deep")
        count = metafunc.config.getoption("--deep-count") if deep else 24
        metafunc.parametrize("spec_seed", range(count))


DEEP = [False]  # --deep given (set before the test modules are imported)
# the longest length a sweep runs at B = 3 by default: past it a batch adds nothing a row does
# not (its rows of other lengths, and so rows with no visible key, are at the shorter ones)
# but thrice the time of the sweep's longest shapes; --deep runs B = 3 at every length
BATCHED_UP_TO = 64


def verified(layer, lengths, **options) -> list:
    """`layer.verify` at `lengths` (a tuple, or a dict of length -> why) with B = 1 and 3 up to
    BATCHED_UP_TO, B = 1 past it (B = 3 too with --deep), each report passed; its
    comparisons."""
    from attndsl.backends import runtime

    if not isinstance(lengths, dict):
        lengths = dict.fromkeys(lengths, "asked for")
    short = {n: why for n, why in lengths.items() if n <= BATCHED_UP_TO or DEEP[0]}
    long = {n: why for n, why in lengths.items() if n not in short}
    # the second report runs the first's sessions (with shared_exports, the same exports): a
    # session keeps nothing between runs, and each report runs its own many shapes on one (a
    # profiled CUDA session's profile is read once: each report makes its own)
    real, sessions = runtime.make_session, {}

    def make_session(model, *args, **kwargs):
        if kwargs.get("profile"):
            return real(model, *args, **kwargs)
        key = (id(model), args, tuple(sorted(kwargs.items())))
        if key not in sessions:
            sessions[key] = (model, real(model, *args, **kwargs))  # (model: its id kept)
        return sessions[key][1]

    comparisons = []
    runtime.make_session = make_session
    try:
        for shapes, batches in ((short, (1, 3)), (long, (1,))):
            if shapes:
                report = layer.verify(lengths=shapes, batches=batches, **options)
                assert report.passed, report.text()
                comparisons += report.comparisons
    finally:
        runtime.make_session = real
    return comparisons


@pytest.hookimpl(wrapper=True)
def pytest_collection(session: pytest.Session):
    """While the test modules are imported (each worker imports every one), `attndsl.load`
    of a spec file returns the Program it gave for the same file, unchanged since: the
    modules' tables load the examples about 1,400 times, 50 files (2 s a worker). Tests
    themselves load afresh."""
    real = attndsl.load
    programs: dict = {}

    def load(path, **options):
        file = Path(path)
        if options or file.suffix != ".attn" or not file.is_file():
            return real(path, **options)
        stat = file.stat()
        key = (file.resolve(), stat.st_mtime_ns, stat.st_size)
        if key not in programs:
            programs[key] = real(path)
        return programs[key]

    attndsl.load = load
    try:
        return (yield)
    finally:
        attndsl.load = real


def pytest_configure(config: pytest.Config) -> None:
    # Hypothesis tests: a fixed-seed slice by default (the same inputs on every run, so CI is
    # reproducible); --deep explores afresh with many more inputs. Hypothesis also draws
    # constants from the project's modules that are loaded when a test runs, so every module
    # is loaded first: otherwise the inputs depend on which tests a worker ran before.
    for module in pkgutil.walk_packages(attndsl.__path__, "attndsl."):
        importlib.import_module(module.name)
    settings.register_profile("slice", derandomize=True, max_examples=150)
    settings.register_profile("deep", max_examples=3000)
    settings.load_profile("deep" if config.getoption("--deep") else "slice")
    DEEP[0] = config.getoption("--deep")
    config.addinivalue_line("markers", "fresh_exports: build every export afresh (no "
                            "sharing through the shared_exports fixture)")


def _features(nodes, strategy: str = "") -> set[tuple]:
    """What a planned graph exercises, sizes and names aside: each op; each attribute's kind
    (strings, flags and presence as they are, numbers by sign, objects by class, a weight's
    name by its presence); each mask primitive; recursively into a switch's branches."""
    from attndsl import masks
    from attndsl.ir.ops import OPS

    out: set[tuple] = set()

    def mask_parts(m) -> None:
        out.add(("mask", type(m).__name__))
        for child in m.children():
            mask_parts(child)

    for node in nodes:
        op = node.op.value
        out.add((op,))
        named = OPS[node.op].tensor_attrs()  # weights: layers.0.self_attn.sinks, sinks, ...
        for key, value in node.attrs:
            if key in ("weight", "module", "outputs"):
                continue
            if key in named and isinstance(value, str):
                out.add((op, key, "a weight"))
                continue
            if key == "branches":
                for branch in value:
                    out |= _features(branch)
            elif isinstance(value, masks.MaskNode):
                mask_parts(value)
            elif value is None or isinstance(value, str | bool):
                out.add((op, key, value))
            elif isinstance(value, int | float):
                out.add((op, key, (value > 0) - (value < 0)))
            else:
                out.add((op, key, type(value).__name__))
    return out


def plan_cover(layers: list[tuple[Path, str]], targets: tuple[str, ...],
               dtype: str = "float32") -> list[tuple[Path, str]]:
    """A secondary sweep's layers: few, in order, whose graphs as planned for `targets` (the
    torch module's is the portable one) exercise together every feature (`_features`) that
    all of `layers` do: each strategy, op, norm, position, activation, mask primitive and
    attribute kind at least once (a greedy cover). The primary sweep (test_equivalence) still
    runs every layer through every backend and target."""
    from attndsl.ir import build
    from attndsl.planner import plan

    found = {}
    for path, name in layers:
        graph = build(attndsl.load(path)[name].spec)
        found[(path, name)] = {(t, *f) for t in targets
                               for f in _features(plan(graph, t, dtype)[0].nodes)}
    chosen, covered = [], set()
    wanted = set().union(*found.values())
    while covered != wanted:
        best = max(found, key=lambda k: len(found[k] - covered))
        chosen.append(best)
        covered |= found[best]
    return [layer for layer in layers if layer in chosen]
