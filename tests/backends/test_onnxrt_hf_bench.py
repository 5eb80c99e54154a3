"""The real transformers models of benchmarks/backends.py's `--hf` rows (NOTE [HF models in the backend
benchmark]): each is one ORT program with nothing left to torch, and equal to eager on fresh inputs."""
from __future__ import annotations

import os
import sys

import pytest
import torch

import framejit
from tests.helpers import OnnxrtRecorder

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "benchmarks"))
import backends as bench  # noqa: E402


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_hf_rows_are_one_ort_program(name):
    case = bench.hf_case(name, "tiny")
    recorder = OnnxrtRecorder()
    compiled = framejit.compile(case.model, backend=recorder)
    with torch.no_grad():
        for seed in (0, 1):
            inputs = case.make_inputs(seed)
            torch.testing.assert_close(compiled(*inputs), case.model(*inputs), rtol=1e-4, atol=1e-5)
    rows = recorder.rows()
    assert rows and all(row["parts"] == 1 and not row["eager_graph"] for row in rows), rows
    left = [r for row in rows for r in row["eager_nodes"].values() if "free op" not in r]
    assert not left, left
