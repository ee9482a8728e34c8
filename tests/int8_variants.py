"""The int8 kernel variants a machine can run, and a switch to one of them that restores the previous one:
every ISA with VNNI off, and each ISA that has a VNNI variant on this CPU (avx2: AVX-VNNI, avx512:
AVX512-VNNI) with it on."""

import contextlib

from attnkit import _core


def int8_variants():
    """(isa, vnni) pairs, exact-product variants first."""
    return [(isa, False) for isa in _core.available_isas()] + [(isa, True) for isa in _core.int8_vnni_isas()]


def variant_name(isa, vnni):
    """What ``_core.get_int8_variant()`` reports for the pair."""
    return isa + "vnni" if vnni else isa


@contextlib.contextmanager
def int8_variant(isa, vnni):
    """Run the int8 kernels as ``(isa, vnni)``; the ISA and the VNNI switch are restored afterwards."""
    previous_isa = _core.get_isa()
    previous_vnni = _core.get_int8_variant().endswith("vnni") or previous_isa not in _core.int8_vnni_isas()
    _core.set_isa(isa)
    if _core.int8_vnni_available():
        _core.set_int8_vnni(vnni)
    try:
        assert _core.get_int8_variant() == variant_name(isa, vnni)
        yield
    finally:
        _core.set_isa(previous_isa)
        if _core.int8_vnni_available():
            _core.set_int8_vnni(previous_vnni)
