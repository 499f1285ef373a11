"""The init measurements docs/paper_notes.md quotes (`python -m lra.decay_stats`), as claims.

At the ListOps preset's width (128, gate weights N(0, 0.1²)) the gate logits have std ≈ 1.1,
so σ(z) is far larger than any HiPPO log-decay |B| ≤ 0.05: the paper's two literal forms put
λ ≥ 1 almost everywhere, and over a long sequence the summed log-decays overflow float32.
"""

import numpy as np

from lra import decay_stats


def test_literal_forms_overflow_and_the_step_forms_stay_in_the_unit_interval():
  stats = {form: decay_stats.summarise(log_decays) for form, log_decays in
           decay_stats.first_layer_log_decays("listops", batch=2, length=1024).items()}
  # LION paper §4.5, a = σ(A) + B: λ ≥ 1 for almost every token (`paper_literal` clamps to 1).
  assert stats["paper_literal"]["frac_ge_1"] > 0.95
  # Table 6 row [7] read literally, a = B + softplus(z): λ > 1, and every row overflows at L = 1024.
  assert stats["softplus_literal"]["frac_ge_1"] > 0.95
  assert stats["softplus_literal"]["frac_overflow"] == 1.0
  for form in ("softplus_dt", "sigmoid_dt"):  # λ ∈ (0, 1): nothing to clamp, nothing overflows
    assert stats[form]["frac_ge_1"] == 0.0 and stats[form]["frac_overflow"] == 0.0, form
    assert 0.0 < stats[form]["min_lambda"] and stats[form]["max_lambda"] < 1.0, form
  # The softplus step's rate is unbounded above: its shortest memory is shorter than the
  # sigmoid step's, whose rate stops at twice the base rate.
  assert stats["softplus_dt"]["min_lambda"] < stats["sigmoid_dt"]["min_lambda"]
  assert np.isfinite(stats["softplus_literal"]["max_lambda"])
