"""The store form of a fitted JDL: ``state()`` as NumPy arrays and JSON, and ``from_state`` back.

``JDLState`` is a mixin of ``jdlcore.models.jdl.JDL`` (and so of its variants): the arrays are the
coefficients H (m_Y, m_X), the training atoms (n, d_Y), the support atoms (M, d_Y) and weights (M,),
the reductions and the registered test functions' sums and support values, besides the bases
(``Estimator._two_basis_state``). It reads the fitted attributes and, in ``from_state``, the host's
``_support``, ``_set_support`` and ``law_rule``; subclasses with other bases or constructors override
``_from_params`` and ``_basis_from_state``.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..conditional.atoms import STANDARD_FUNCTIONS, Atoms, FunctionSums, evaluate_function
from ..conditional.support import Support
from ..kernels import kernel_from_dict
from ..lowrank.basis import JDLReductions, SpectralBasis
from .problem import JDLProblem

__all__ = ["JDLState"]


class JDLState:
    """``state`` / ``from_state`` of a fitted JDL (a mixin: the host is a ``JDL``)."""

    def state(self) -> dict[str, Any]:
        """Everything a fitted model needs, as NumPy arrays and JSON-able values (no pickles).

        ``from_state(state())`` rebuilds a model whose queries are bit-identical. The training atoms
        are passed through as they are (a lazily read array stays lazy). A registered test function
        k keeps its sums over the training atoms (``registered_{k}_moments`` / ``_totals``) and its
        values at the support atoms (``registered_{k}_support``); names and shapes under "registered".
        """
        self._fitted()
        red = self.reductions_
        arrays = {
            "coef": self.coef_, "y_atoms": self.y_atoms_, **self.support_.to_arrays(),
            **{f"reduction_{name}": getattr(red, name) for name in red.__dataclass_fields__ if name != "n"},
        }
        registered = []
        for k, (name, sums) in enumerate(self._training_sums.items()):
            arrays[f"registered_{k}_moments"], arrays[f"registered_{k}_totals"] = sums.moments, sums.totals
            arrays[f"registered_{k}_support"] = self._support_values[name][0]
            registered.append({"name": name, "shape": list(sums.shape)})
        return {
            **self._two_basis_state(arrays),
            "registered": registered,
            "support": {"construction": self.support_.construction, "exact": self.support_.exact,
                        "defect": self.support_.defect, "requested": self.support_.requested},
        }

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> "JDLState":
        """Rebuild a fitted model from ``state()``; raises ``ValueError`` on missing or inconsistent parts.

        A state without support atoms (a store written before they existed) gets them built from its
        training atoms, in one pass, as a fit would.
        """
        try:
            y_atoms = state["arrays"]["y_atoms"]
            arrays = {k: np.asarray(v, dtype=np.float64) for k, v in state["arrays"].items() if k != "y_atoms"}
            model = cls._from_params(state)
            n = int(state["n_samples"])
            bases = {side: cls._basis_from_state(side, arrays, state) for side in ("x", "y")}
            reductions = JDLReductions(n=n, **{
                name: arrays[f"reduction_{name}"] for name in JDLReductions.__dataclass_fields__ if name != "n"
            })
            coef = arrays["coef"]
            registered = {
                entry["name"]: FunctionSums(arrays[f"registered_{k}_moments"], arrays[f"registered_{k}_totals"],
                                            tuple(int(s) for s in entry["shape"]))
                for k, entry in enumerate(state.get("registered", []))
            }
        except KeyError as missing:
            raise ValueError(f"state: missing part {missing}") from None
        m_y, m_x = coef.shape
        shapes = {name: array.shape for name, array in arrays.items()}
        shapes["y_atoms"] = tuple(y_atoms.shape)
        if (bases["x"].size, bases["y"].size) != (m_x, m_y):
            raise ValueError(f"state: coef has shape {coef.shape}, the bases have {bases['y'].size} x {bases['x'].size}")
        d_y = bases["y"].width
        expected = {"y_atoms": (n, d_y), "reduction_cross": (m_y, m_x)}
        has_support = "support_atoms" in arrays
        if has_support:
            M = shapes.get("support_weights", (0,))[0]
            expected["support_atoms"] = (M, d_y)
        for k, (name, sums) in enumerate(registered.items()):
            p = int(np.prod(sums.shape))
            expected[f"registered_{k}_moments"], expected[f"registered_{k}_totals"] = (m_y, p), (p,)
            if has_support:
                expected[f"registered_{k}_support"] = (M, p)
        for name, shape in expected.items():
            if shapes.get(name) != shape:
                raise ValueError(f"state: {name} has shape {shapes.get(name)}, expected {shape}")
        model.check_params()
        model.basis_x_, model.basis_y_ = bases["x"], bases["y"]
        model.coef_ = coef
        model.atoms_ = Atoms(y_atoms, bases["y"])
        model.reductions_, model.n_samples_ = reductions, n
        model.diagnostics_ = {
            **state.get("diagnostics", {}),
            "trace_error_x": arrays["x_trace_error"], "trace_error_y": arrays["y_trace_error"],
        }
        model._training_sums = registered
        if has_support:
            meta = state.get("support", {})
            support = Support(arrays["support_atoms"], arrays["support_weights"], meta.get("construction", "bins"),
                              float(meta.get("defect", 0.0)), meta.get("exact", "none"), int(meta.get("requested", M)))
            values = {name: (arrays[f"registered_{k}_support"], sums.shape) for k, (name, sums) in enumerate(registered.items())}
        else:
            problem = JDLProblem(bases["x"], bases["y"], None, None, reductions, {}, registered)
            support, model._training_sums = model._support(problem, model.atoms_)
            values = {name: evaluate_function(f, support.atoms) for name, f in STANDARD_FUNCTIONS.items()}
            model.diagnostics_.update({"law": model.law_rule, "support_size": support.size,
                                       "support_construction": support.construction, "support_exact": support.exact,
                                       "support_defect": support.defect})
        model._set_support(support)
        model._support_values = values
        return model

    @classmethod
    def _from_params(cls, state: dict[str, Any]) -> "JDLState":
        """An unfitted estimator with the stored hyperparameters."""
        return cls(kernel_x=kernel_from_dict(state["kernel_x"]), kernel_y=kernel_from_dict(state["kernel_y"]),
                   **state["params"])

    @classmethod
    def _basis_from_state(cls, side: str, arrays: dict[str, np.ndarray], state: dict[str, Any]) -> Any:
        """The basis of one side ("x" or "y") from ``state()``'s arrays (subclasses with other bases override)."""
        return SpectralBasis.from_arrays(kernel_from_dict(state[f"kernel_{side}"]), arrays, side)
