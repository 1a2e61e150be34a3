"""Is it real? Significance of each explanation

RDX always returns k explanations with high BSR, also when two models differ only by their
training seed. `rdx.evaluation.significance.assess` re-runs the method on null pairs (copies
of A and of B moved by a smooth random field until they share as many neighbours as A and
B do) and gives every explanation a family-wise p-value against the strongest explanation
of each null pair. This is what `rdx explain --significance` computes; a seed twin
(`control_b=`) is the gold standard when you have one. Without one the field null gives a
verdict only for a model family it is calibrated for: the digits example's models are MLPs
(`family="mlp"`), whose calibration rescales the null's maxima by e^-0.45.
"""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from rdx import RDX
from rdx.evaluation.significance import assess
from rdx.examples import digits_example

ex = digits_example(progress=False)
result = RDX(n_explanations=3, random_state=42).fit(ex.A, ex.B).result()
summary = assess(result, ex.A, ex.B, random_state=0, family="mlp")
print(f"null: {summary['null']}, draws: {summary['n_draws']}, alpha: {summary['alpha']}, "
      f"calibrated: {summary['calibrated']} ({summary['standing']['basis']})")

names, p_values = [], []
for direction, records in summary["explanations"].items():
    for i, record in enumerate(records, start=1):
        names.append(f"{direction} #{i}")
        p_values.append(record["p_value_fwer"])
        verdict = ("no verdict" if record["significant"] is None else
                   "significant" if record["significant"] else "not significant")
        print(f"{direction} #{i}: statistic {record['statistic']:.1f}, "
              f"p_FWER {record['p_value_fwer']:.3g} ({verdict})")

fig, ax = plt.subplots(figsize=(6, 2.8))
ax.barh(names, p_values, color=["#0072B2" if p <= summary["alpha"] else "#999999"
                                for p in p_values])
ax.axvline(summary["alpha"], color="#D55E00", linestyle="--", label="alpha")
ax.set_xscale("log")
ax.set_xlabel("family-wise p-value (log scale)")
ax.invert_yaxis()
ax.legend(loc="lower right")
fig.tight_layout()
fig.savefig("p_values.png", dpi=110)
