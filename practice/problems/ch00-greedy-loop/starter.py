def greedy_generate(model, prompt_ids: list[int], max_new_tokens: int, eos_ids=()) -> list[int]:
    """Greedy decoding with a cached model.

    model(token_ids, start_pos) -> one list of logits per token in token_ids; start_pos must equal the
    number of tokens already cached (0 starts over). Return the new ids (EOS included when it stops).
    """
    raise NotImplementedError
