import copy

from solution import rope_settings

EXAMPLES = ["test_statement_example", "test_old_format_without_scaling"]

BASE = {"hidden_size": 64, "num_attention_heads": 4}


def test_statement_example():
    got = rope_settings({**BASE, "rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 5e5}})
    want = {"theta": 500000.0, "head_dim": 16, "scaling": {"rope_type": "linear", "factor": 2.0}}
    assert got == want, f"got {got}, expected {want}"


def test_old_format_without_scaling():
    got = rope_settings({**BASE, "rope_theta": 1000000, "rope_scaling": None, "head_dim": 128})
    assert got == {"theta": 1000000.0, "head_dim": 128, "scaling": None}, f"got {got}"
    assert isinstance(got["theta"], float), "theta must be a float even if the config has an int"


def test_new_format_default_type_has_no_scaling():
    got = rope_settings({**BASE, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})
    assert got == {"theta": 1e6, "head_dim": 16, "scaling": None}, \
        f"got {got}; theta comes from rope_parameters, and type 'default' means no scaling"


def test_old_format_with_legacy_type_key():
    cfg = {**BASE, "rope_theta": 500000.0,
           "rope_scaling": {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 8192}}
    got = rope_settings(cfg)
    assert got["theta"] == 500000.0
    assert got["scaling"] == {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192}, \
        f"`type` becomes `rope_type` and is dropped: {got['scaling']}"


def test_defaults_when_nothing_is_given():
    assert rope_settings(dict(BASE)) == {"theta": 10000.0, "head_dim": 16, "scaling": None}


def test_head_dim_null_falls_back():
    assert rope_settings({**BASE, "head_dim": None})["head_dim"] == 16, "head_dim: null means compute it"


def test_top_level_theta_wins_and_new_format_preferred():
    cfg = {**BASE, "rope_theta": 7.0, "rope_parameters": {"rope_type": "yarn", "factor": 4.0, "rope_theta": 9.0},
           "rope_scaling": {"rope_type": "linear", "factor": 99.0}}
    got = rope_settings(cfg)
    assert got["theta"] == 7.0, "a top-level rope_theta is used before the rope dict's"
    assert got["scaling"] == {"rope_type": "yarn", "factor": 4.0}, "rope_parameters is read before rope_scaling"


def test_config_is_not_modified():
    cfg = {**BASE, "rope_scaling": {"type": "linear", "factor": 2.0, "rope_theta": 3.0}}
    before = copy.deepcopy(cfg)
    got = rope_settings(cfg)
    assert cfg == before, f"the input config was changed: {cfg}"
    got["scaling"]["factor"] = 0
    assert cfg == before, "the returned scaling dict must be a new dict, not the config's"
