from solution import int8_matvec, quantize_rows

EXAMPLES = ["test_statement_example", "test_scale_after_the_dot_product_bias_unscaled"]


def test_statement_example():
    codes, scales = quantize_rows([[127.0, 0.5, 1.5, -2.5], [0.0, -2.0, 1.0, 0.5]])
    assert scales == [1.0, 2.0 / 127], f"scale = max|row| / 127 per row: got {scales}"
    assert codes[0] == [127, 0, 2, -2], f"row 0, scale 1: round half to even gives [127, 0, 2, -2], got {codes[0]}"
    assert codes[1] == [0, -127, 64, 32], f"row 1: -2.0 is the largest magnitude, so code -127; got {codes[1]}"


def test_scale_after_the_dot_product_bias_unscaled():
    y = int8_matvec([[1, -2], [127, 0]], [0.5, 0.01], [3.0, 1.0], bias=[10.0, -1.0])
    want = [0.5 * (3 - 2) + 10.0, 0.01 * 381 - 1.0]
    assert all(abs(a - b) < 1e-12 for a, b in zip(y, want)), f"expected {want}, got {y}"


def test_every_value_within_half_a_step():
    rows = [[0.013 * k - 0.2 for k in range(37)], [(-1) ** k * 1e-4 * k for k in range(37)],
            [5.0] + [0.001 * k for k in range(36)]]
    codes, scales = quantize_rows(rows)
    for o, row in enumerate(rows):
        for k, v in enumerate(row):
            err = abs(codes[o][k] * scales[o] - v)
            assert err <= scales[o] / 2 * (1 + 1e-9), \
                f"row {o}, column {k}: {v} -> code {codes[o][k]}, off by {err:.3g} > half a step {scales[o] / 2:.3g}"
            assert -127 <= codes[o][k] <= 127 and isinstance(codes[o][k], int)


def test_zero_row_and_per_row_scales():
    codes, scales = quantize_rows([[0.0, 0.0], [100.0, 1.0], [0.02, -0.01]])
    assert codes[0] == [0, 0] and scales[0] == 1.0, f"an all-zero row: codes 0, scale 1.0; got {codes[0]}, {scales[0]}"
    assert codes[2] == [127, -64], f"a small row keeps its own range (scale per row, not per column): {codes[2]}"


def test_matvec_matches_the_dequantized_rows():
    rows = [[0.3, -0.7, 0.1], [-1.2, 0.4, 0.9]]
    codes, scales = quantize_rows(rows)
    x = [1.5, -2.0, 0.25]
    y = int8_matvec(codes, scales, x)
    want = [sum(c * s * v for c, v in zip(row, x)) for row, s in zip(codes, scales)]
    assert all(abs(a - b) < 1e-12 for a, b in zip(y, want)), f"expected {want}, got {y}"
    assert int8_matvec(codes, scales, x, bias=None) == y


def test_errors():
    bad = [lambda: quantize_rows([]), lambda: quantize_rows([[1.0], [1.0, 2.0]]), lambda: quantize_rows([[]]),
           lambda: int8_matvec([[1, 2]], [1.0], [1.0]), lambda: int8_matvec([[1]], [1.0, 2.0], [1.0]),
           lambda: int8_matvec([[1]], [1.0], [1.0], bias=[1.0, 2.0])]
    for i, call in enumerate(bad):
        try:
            call()
        except ValueError:
            continue
        raise AssertionError(f"case {i} must raise ValueError")


def test_inputs_are_not_changed():
    rows = [[1.0, -3.0], [0.5, 0.25]]
    kept = [list(r) for r in rows]
    codes, scales = quantize_rows(rows)
    assert rows == kept
    c2, s2, x = [list(r) for r in codes], list(scales), [1.0, 2.0]
    int8_matvec(codes, scales, x, [0.0, 0.0])
    assert codes == c2 and scales == s2 and x == [1.0, 2.0]
