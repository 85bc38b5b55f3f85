import cmath
import math
import random

from solution import apply_rope, inv_freq, llama3_scale

EXAMPLES = ["test_statement_example", "test_llama3_three_regimes"]
PI = math.pi


def close(a, b, tol=1e-9):
    return len(a) == len(b) and all(abs(u - v) <= tol * max(1.0, abs(v)) for u, v in zip(a, b))


def rope_oracle(x, position, freqs):
    """Each pair (x[i], x[i + h]) as the complex number x[i] + j x[i + h], turned by e^(j * angle)."""
    h = len(freqs)
    z = [complex(x[i], x[i + h]) * cmath.exp(1j * position * freqs[i]) for i in range(h)]
    return [c.real for c in z] + [c.imag for c in z]


def test_statement_example():
    got = inv_freq(8, 10000.0)
    assert close(got, [1.0, 0.1, 0.01, 0.001]), f"inv_freq(8, 10000) should be [1, 0.1, 0.01, 0.001], got {got}"
    got = apply_rope([1.0, 2.0, 3.0, 4.0], 1, [PI / 2, PI])
    assert close(got, [-3.0, -2.0, 1.0, -4.0]), \
        f"pairs are (x[0], x[2]) and (x[1], x[3]): expected [-3, -2, 1, -4], got {got}"


def test_llama3_three_regimes():
    freqs = [2 * PI / 8, 2 * PI / 32, 2 * PI / 128]
    got = llama3_scale(freqs, 8, 1, 4, 64)
    expected = [2 * PI / 8, 2 * PI / 32 * 5 / 12, 2 * PI / 128 / 8]
    assert close(got, expected), \
        f"wavelength 8 is kept, 32 is blended (x 5/12), 128 is divided by 8: expected {expected}, got {got}"


def test_inv_freq_shapes_and_errors():
    assert close(inv_freq(2, 10000.0), [1.0]), f"head_dim 2 has one pair turning at speed 1, got {inv_freq(2, 10000.0)}"
    got = inv_freq(4, 100.0)
    assert close(got, [1.0, 0.1]), f"inv_freq(4, 100) = [100**0, 100**-0.5] = [1, 0.1], got {got}"
    assert len(inv_freq(128, 1e6)) == 64, "head_dim 128 has 64 pairs"
    for bad in (0, 3, -4):
        try:
            inv_freq(bad, 10000.0)
        except ValueError:
            continue
        raise AssertionError(f"inv_freq({bad}, ...) should raise ValueError")


def test_position_zero_is_identity_and_lengths_checked():
    x = [0.3, -1.2, 2.5, 0.7, -0.1, 4.0]
    assert close(apply_rope(x, 0, [1.0, 0.1, 0.01]), x), "position 0 does not rotate"
    try:
        apply_rope([1.0, 2.0, 3.0], 1, [1.0])
    except ValueError:
        return
    raise AssertionError("apply_rope with len(x) != 2 * len(freqs) should raise ValueError")


def test_llama31_against_a_direct_oracle():
    freqs = inv_freq(128, 500000.0)
    got = llama3_scale(freqs, 8.0, 1.0, 4.0, 8192)
    for i, (f, g) in enumerate(zip(freqs, got)):
        w = 2 * PI / f
        if w < 2048:
            want = f
        elif w > 8192:
            want = f / 8
        else:
            s = (8192 / w - 1) / 3
            want = f * ((1 - s) / 8 + s)
        assert abs(g - want) <= 1e-12 * want, f"pair {i} (wavelength {w:.1f}): expected {want}, got {g}"
    ratios = [g / f for f, g in zip(freqs, got)]
    assert all(1 / 8 - 1e-12 <= r <= 1 + 1e-12 for r in ratios), "every frequency is scaled by something in [1/8, 1]"
    assert all(a >= b - 1e-12 for a, b in zip(ratios, ratios[1:])), "slower pairs are never scaled less than faster ones"


def test_random_rotations_match_complex_numbers():
    rng = random.Random(5)
    for _ in range(300):
        h = rng.randint(1, 4)
        freqs = [rng.uniform(0.001, 2.0) for _ in range(h)]
        x = [rng.uniform(-3, 3) for _ in range(2 * h)]
        pos = rng.randint(0, 5000)
        got = apply_rope(x, pos, freqs)
        assert close(got, rope_oracle(x, pos, freqs), 1e-8), \
            f"x={x}, position {pos}: expected {rope_oracle(x, pos, freqs)}, got {got} (pair i with i + h, not 2i with 2i+1)"
        n0, n1 = math.fsum(v * v for v in x), math.fsum(v * v for v in got)
        assert abs(n0 - n1) <= 1e-9 * max(1.0, n0), "a rotation keeps the vector's length"


def test_attention_scores_depend_on_relative_position():
    rng = random.Random(6)
    freqs = inv_freq(16, 10000.0)
    for _ in range(30):
        q = [rng.uniform(-1, 1) for _ in range(16)]
        k = [rng.uniform(-1, 1) for _ in range(16)]
        m, n, shift = rng.randint(0, 300), rng.randint(0, 300), rng.randint(1, 1000)
        a = sum(u * v for u, v in zip(apply_rope(q, m, freqs), apply_rope(k, n, freqs)))
        b = sum(u * v for u, v in zip(apply_rope(q, m + shift, freqs), apply_rope(k, n + shift, freqs)))
        assert abs(a - b) <= 1e-8, f"q.k at positions ({m}, {n}) and ({m + shift}, {n + shift}) should match: {a} vs {b}"
