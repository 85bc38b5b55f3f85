import random

from solution import merge_weights

EXAMPLES = ["test_statement_example", "test_gate_up_and_passthrough"]


def test_statement_example():
    got = merge_weights([
        ("l0.attn.k_proj.weight", [[2]]),
        ("l0.norm.weight", [[9]]),
        ("l0.attn.v_proj.weight", [[3]]),
        ("l0.attn.q_proj.weight", [[1], [1]]),
    ])
    assert got == [("l0.norm.weight", [[9]]), ("l0.attn.qkv_proj.weight", [[1], [1], [2], [3]])], \
        f"q rows, then k, then v, emitted when the last part arrives: got {got}"


def test_gate_up_and_passthrough():
    got = merge_weights([
        ("embed.weight", [[0, 0]]),
        ("l0.mlp.up_proj.weight", [[5, 6]]),
        ("l0.mlp.gate_proj.weight", [[3, 4]]),
        ("l0.mlp.down_proj.weight", [[7, 8]]),
    ])
    assert got == [("embed.weight", [[0, 0]]), ("l0.mlp.gate_up_proj.weight", [[3, 4], [5, 6]]),
                   ("l0.mlp.down_proj.weight", [[7, 8]])], f"gate rows come before up rows: got {got}"


def test_weight_and_bias_are_merged_separately():
    got = dict(merge_weights([
        ("a.q_proj.bias", [[1]]), ("a.q_proj.weight", [[10]]),
        ("a.k_proj.weight", [[20]]), ("a.k_proj.bias", [[2]]),
        ("a.v_proj.bias", [[3]]), ("a.v_proj.weight", [[30]]),
    ]))
    assert got == {"a.qkv_proj.bias": [[1], [2], [3]], "a.qkv_proj.weight": [[10], [20], [30]]}, got


def test_names_that_only_look_similar_pass_through():
    items = [("l0.attn.q_norm.weight", [[1]]), ("q_proj", [[2]]), ("l0.q_proj_extra.weight", [[3]])]
    assert merge_weights(items) == items, "only the second-to-last name component selects a merge"


def test_missing_part_is_an_error_naming_the_tensor():
    try:
        merge_weights([("l3.attn.q_proj.weight", [[1]]), ("l3.attn.v_proj.weight", [[3]])])
    except ValueError as e:
        assert "l3.attn.qkv_proj.weight" in str(e), f"name the incomplete merged tensor: {e}"
    else:
        raise AssertionError("k_proj never arrived: expected ValueError")


def test_duplicate_part_is_an_error():
    try:
        merge_weights([("x.up_proj.weight", [[1]]), ("x.up_proj.weight", [[1]]), ("x.gate_proj.weight", [[0]])])
    except ValueError:
        return
    raise AssertionError("up_proj arrived twice: expected ValueError")


def test_empty_stream():
    assert merge_weights([]) == []


def test_random_orders_match_a_brute_force():
    rng = random.Random(3)
    layers = 4
    items = []
    for layer in range(layers):
        for mod in ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"):
            items.append((f"model.layers.{layer}.{mod}.weight", [[layer, mod, r] for r in range(rng.randint(1, 3))]))
        items.append((f"model.layers.{layer}.input_layernorm.weight", [[layer]]))
    for trial in range(30):
        order = items[:]
        rng.shuffle(order)
        got = merge_weights(order)
        # brute force: a merged tensor appears right after its last part's arrival
        expected = []
        seen = {}
        for name, rows in order:
            prefix, mod, last = name.rsplit(".", 2)
            groups = {"q_proj": ("qkv_proj", ["q_proj", "k_proj", "v_proj"]),
                      "k_proj": ("qkv_proj", ["q_proj", "k_proj", "v_proj"]),
                      "v_proj": ("qkv_proj", ["q_proj", "k_proj", "v_proj"]),
                      "gate_proj": ("gate_up_proj", ["gate_proj", "up_proj"]),
                      "up_proj": ("gate_up_proj", ["gate_proj", "up_proj"])}
            if mod not in groups:
                expected.append((name, rows))
                continue
            seen[name] = rows
            merged, members = groups[mod]
            full = [f"{prefix}.{m}.{last}" for m in members]
            if all(f in seen for f in full):
                expected.append((f"{prefix}.{merged}.{last}", [r for f in full for r in seen[f]]))
        if got != expected:
            i = next((k for k, (g, e) in enumerate(zip(got, expected)) if g != e), min(len(got), len(expected)))
            raise AssertionError(f"trial {trial}: output entry {i} is {got[i] if i < len(got) else 'missing'}, "
                                 f"expected {expected[i] if i < len(expected) else 'nothing'}")
