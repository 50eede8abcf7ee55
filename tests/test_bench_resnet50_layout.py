"""Issue 28's accelerator bench (``python -m bench.resnet50_accel --preset issue28``) runs on a CPU on a stand-in
ResNet, so that it cannot break unseen; its figures mean nothing there (it asserts what the rows hold, not speed)."""

import json

import pytest

from bench import resnet50_accel
from bench.resnet50_layout import _lowered_counts, bench_issue28, summary

_STAND_IN = dict(blocks=(1, 1, 1, 1), width=0.0625, devices=1)


def test_the_summary_pairs_on_and_off_and_counts_what_the_pass_did():
    rows = [{"graphpar": "O0", "batch": 256, "format_transform": "channels_last", "ratio": 0.9, "compile_ratio": 1.5},
            {"graphpar": "O0", "batch": 256, "format_transform": "off", "ratio": 1.1, "compile_ratio": 1.4},
            {"graphpar": "O2", "batch": 256, "format_transform": "channels_last", "ratio": 1.0, "compile_ratio": 1.1}]
    assert summary(rows) == {"ratio": {"O0 batch 256": {"channels_last": 0.9, "off": 1.1, "on_over_off": 0.818},
                                       "O2 batch 256": {"channels_last": 1.0}},
                             "compile_ratio": {"O0": [1.5, 1.4], "O2": [1.1]}}
    text = ("%0 = stablehlo.transpose %x, dims = [0, 2, 3, 1]\n"
            "%1 = stablehlo.convolution(%0, %w) dim_numbers = [b, 0, 1, f]x[o, i, 0, 1]->[b, 0, 1, f], window = {}\n"
            "%2 = stablehlo.convolution(%a, %b) dim_numbers = [b, f, 0, 1]x[o, i, 0, 1]->[b, f, 0, 1], window = {}\n")
    assert _lowered_counts(text) == {"transposes": 1, "convolutions": 2, "convolutions_nhwc": 1}


@pytest.mark.slow  # three compiles of the stand-in: 1-2 minutes on a loaded 2-core CPU
def test_one_row_on_a_stand_in():
    rows = list(bench_issue28((2,), 16, calls=1, rounds=1, levels=("O0",), compile_level="",
                              transforms=("channels_last",), say=lambda s: None, **_STAND_IN))
    (row,) = rows
    assert row["graphpar"] == "O0" and row["format_transform"] == "channels_last" and row["batch"] == 2
    assert row["graphpar_ms"] > 0 and row["flax_ms"] > 0 and row["graphpar_compile_s"] > 0
    # the pass acted: the forward convolutions and the input gradients' run channels-last; the image is transposed
    # once, on its way into the region
    assert row["convolutions_nhwc"] == 31 and row["convolutions"] == 47
    assert summary(rows)["ratio"] == {"O0 batch 2": {"channels_last": row["ratio"]}}


@pytest.mark.slow  # seven compiles of the stand-in: minutes on a loaded CPU
def test_the_preset_on_a_stand_in(tmp_path, capsys):
    out = tmp_path / "issue28.json"
    resnet50_accel.main(["--preset", "issue28", "--batch", "2", "--image", "32", "--calls", "1", "--rounds", "1",
                         "--blocks", "1,1,1,1", "--width", "0.0625", "--devices", "1", "--json", str(out)])
    written = json.loads(out.read_text())
    rows = written["rows"]
    assert [(r["graphpar"], r["format_transform"]) for r in rows] == [
        ("O0", "channels_last"), ("O0", "off"), ("O3", "channels_last"), ("O3", "off"), ("O2", "channels_last")]
    assert rows[1]["convolutions_nhwc"] == 0 and rows[0]["transposes"] == rows[1]["transposes"] + 1
    assert set(written["summary"]["compile_ratio"]) == {"O0", "O2"}
    assert "on_over_off" in written["summary"]["ratio"]["O0 batch 2"]
    assert "compiling graphpar O2" in capsys.readouterr().out
