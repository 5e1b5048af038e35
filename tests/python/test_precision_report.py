"""tools/precision_report.py --check: each precision's bound (docs/precision.md) on rows as the report
writes them; a refused precision and each kind of miss fail, rows within every bound pass."""
import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "tools"))
import precision_report  # noqa: E402


def rows(prec, changed, accuracy):
    return [{"model": "m", "precision": "fp32", "accuracy": 0.9},
            {"model": "m", "precision": prec, "accuracy": accuracy, "class_changed": changed, "max_abs_dp": 0.01}]


def test_within_bounds_pass():
    assert precision_report.check_rows(rows("fp16", 0.001, 0.901)) == []
    assert precision_report.check_rows(rows("bf16", 0.0022, 0.8995)) == []
    assert precision_report.check_rows(rows("int8", 0.0036, 0.8996)) == []


def test_class_changes_past_the_bound_fail():
    missed = precision_report.check_rows(rows("fp16", 0.0011, 0.9))
    assert len(missed) == 1 and "0.11 % of classes changed (bound 0.1 %)" in missed[0]
    assert precision_report.check_rows(rows("bf16", 0.0031, 0.9))


def test_accuracy_moves_past_the_bound_fail():
    missed = precision_report.check_rows(rows("int8", 0.001, 0.894))
    assert len(missed) == 1 and "accuracy moved 0.60 points (bound 0.5)" in missed[0]
    assert precision_report.check_rows(rows("fp16", 0.0, 0.8985))


def test_a_refused_precision_fails():
    r = [{"model": "m", "precision": "fp32", "accuracy": 0.9},
         {"model": "m", "precision": "int8", "backend": "custom", "refused": "no calibration"}]
    missed = precision_report.check_rows(r)
    assert missed == ["m int8: refused (no calibration)"]
