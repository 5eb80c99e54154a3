"""Adversarial differential programs, ninth round (issue 12, red team): facts of the arguments and of Python
state changed between calls as ordinary users change them. Each runs eagerly and compiled on separate but
equal state over several calls, changing the state between calls."""
from __future__ import annotations

import pytest
import torch

import framejit
from tests.helpers import CountingBackend, assert_same

BACKENDS = ["eager", "onnxrt", "triton"]


def _backend(name):
    return CountingBackend() if name == "eager" else name


# ---- NOTE [Lazy negation and conjugation bits] -------------------------------------------------------------

def _reads_the_conj_bit(x):
    return x * 2, x.is_conj(), x.is_neg()


def test_conjugation_and_negation_bits_are_guarded():
    # before: the entry traced for a plain complex tensor answered is_conj() False for x.conj() (and is_neg()
    # False for x.conj().imag), and the reverse
    compiled = framejit.compile(_reads_the_conj_bit, backend=CountingBackend())
    z = torch.tensor([1 + 2j, 3 - 1j])
    for x in (z, z.conj(), z, z.conj(), z.real, z.conj().imag, z.imag):
        expected, actual = _reads_the_conj_bit(x), compiled(x)
        assert_same(actual[0], expected[0])
        assert actual[1:] == expected[1:]


def _scale_and_write(y, z):
    out = y * 2 + 1
    y.add_(z)
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_negative_view_inputs_are_read_and_written_as_eager(backend):
    # before: triton read the memory under x.conj().imag without its negation bit (y * 2 + 1 gave [5, -1] for
    # [-2, 1]) and wrote y.add_(z) un-negated into the complex tensor
    compiled = framejit.compile(_scale_and_write, backend=_backend(backend))
    for _ in range(2):
        for neg in (False, True, False):
            z = torch.tensor([1 + 2j, 3 - 1j])
            z_c = z.clone()
            y = torch.conj(z).imag if neg else z.imag
            y_c = torch.conj(z_c).imag if neg else z_c.imag
            expected, actual = _scale_and_write(y, torch.ones(2)), compiled(y_c, torch.ones(2))
            assert_same(actual, expected)
            assert_same(z_c, z)
