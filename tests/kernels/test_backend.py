"""Host-side helpers of _backend that replace Triton's constexpr functions in launchers."""

import triton

from xpuinject_kernels import _backend


def test_cdiv_and_next_pow2_match_triton():
    assert [_backend.next_pow2(i) for i in range(0, 4097)] == [triton.next_power_of_2(i) for i in range(0, 4097)]
    assert _backend.next_pow2(2**40 + 1) == 2**41
    for a in range(0, 300):
        for b in range(1, 40):
            assert _backend.cdiv(a, b) == triton.cdiv(a, b), (a, b)
