"""verify's report: one row per backend and shape (`Comparison`: PASS or FAIL against the
tolerance, SKIPPED where the shape could not run, INFO where nothing was held to one), and the
`Report` of a layer: its text table, its verdict and its JSON."""

from __future__ import annotations

import json
import textwrap
from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = ["Comparison", "Report"]


@dataclass(frozen=True)
class Comparison:
    batch: int
    length: int
    memory_length: int | None
    backend: str  # "torch", or "<target> on <provider>" for ONNX Runtime
    max_abs: float
    max_rel: float
    tolerance: float
    passed: bool | None  # None: nothing was held to a tolerance (a skipped or informational row)
    note: str = ""
    kind: str = "compared"  # or "skipped" (the shape could not run), "info" (reported only)

    @property
    def verdict(self) -> str:
        """PASS or FAIL for a comparison; SKIPPED or INFO for a row that compared nothing, so
        that neither reads as a pass."""
        if self.kind == "compared":
            return "PASS" if self.passed else "FAIL"
        return "SKIPPED" if self.kind == "skipped" else "INFO"

    @property
    def shape(self) -> str:
        s = f"B={self.batch} L={self.length}"
        return s + (f" S={self.memory_length}" if self.memory_length is not None else "")


@dataclass
class Report:
    layer: str
    targets: tuple[str, ...]
    dtype: str
    seed: int
    why: dict[int, str] = field(default_factory=dict)  # each length's reason to be checked
    comparisons: list[Comparison] = field(default_factory=list)
    # per shape: the inputs, and each backend's output (kept for --save-inputs/--save-outputs)
    feeds: list[dict[str, np.ndarray]] = field(default_factory=list, repr=False)
    outputs: dict[str, list[dict[str, np.ndarray]]] = field(default_factory=dict, repr=False)
    # where the weights came from (a file or checkpoint folder, "a module's tensors", "a state
    # dict": verify.weights_source), or None: drawn from `seed`, which then draws the weights
    # and the inputs; with given weights it draws the inputs alone
    weights: str | None = None

    @property
    def compared(self) -> list[Comparison]:
        """The rows held to a tolerance: not the skipped shapes nor the informational rows."""
        return [c for c in self.comparisons if c.kind == "compared"]

    @property
    def passed(self) -> bool:
        """Every comparison within tolerance, and at least one made: a report whose every
        shape was skipped verified nothing."""
        return bool(self.compared) and all(c.passed for c in self.compared)

    def text(self) -> str:
        head = f"{'shape':<20} {'backend vs reference':<24} {'max abs':>10} {'max rel':>10} " \
               f"{'tolerance':>10}  verdict"
        source = f"weights {self.weights}; inputs from seed {self.seed}" if self.weights \
            else f"seed {self.seed}"
        lines = [f"verify {self.layer} (targets {', '.join(self.targets)}; {self.dtype}; "
                 f"{source})",
                 *textwrap.wrap("lengths: " + ", ".join(f"{n} ({why})" for n, why in
                                                        self.why.items()),
                                100, subsequent_indent="  ", break_on_hyphens=False),
                 head, "-" * len(head)]
        for c in self.comparisons:
            if c.kind == "skipped":  # no numbers to show: nothing ran
                numbers = f"{'-':>10} {'-':>10} {'-':>10}"
            else:
                tol = f"{'-':>10}" if c.kind == "info" else f"{c.tolerance:>10.3e}"
                numbers = f"{c.max_abs:>10.3e} {c.max_rel:>10.3e} {tol}"
            lines.append(f"{c.shape:<20} {c.backend:<24} {numbers}  {c.verdict}"
                         f"{'  ' + c.note if c.note else ''}")
        lines.append(self._summary())
        return "\n".join(lines)

    def _summary(self) -> str:
        """The last line: what passed, out of what was compared, and what was not counted."""
        skipped = sum(c.kind == "skipped" for c in self.comparisons)
        info = sum(c.kind == "info" for c in self.comparisons)
        aside = ", ".join(part for part in (
            f"{skipped} skipped shape{'s' * (skipped != 1)}" if skipped else "",
            f"{info} informational row{'s' * (info != 1)}" if info else "") if part)
        if not self.compared:
            return (f"NOT VERIFIED: nothing was compared ({aside or 'no shapes'}; see the "
                    "reasons above)")
        ok = sum(bool(c.passed) for c in self.compared)
        return (f"{'PASSED' if self.passed else 'FAILED'}: {ok} of {len(self.compared)} "
                "comparisons within tolerance" + (f" (not counted: {aside})" if aside else ""))

    def to_dict(self) -> dict:
        return {"layer": self.layer, "targets": list(self.targets), "dtype": self.dtype,
                "seed": self.seed, "weights": self.weights, "passed": self.passed,
                "compared": len(self.compared),
                "lengths": [{"length": n, "why": why} for n, why in self.why.items()],
                "comparisons": [asdict(c) | {"shape": c.shape, "verdict": c.verdict}
                                for c in self.comparisons]}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)
