RIGHT = {
    ("ch15.peak_gib", "ch15.internlm_prompt"): '''from course_lib.check import ch15


def internlm_prompt(tokenizer, messages):
    # messages: [{"role": "user" or "assistant", "content": str}, ...]; the last one is the user's
    text = ""
    for message in messages:
        if message["role"] == "user":
            text += f"<|User|>:{message['content']}<eoh>\\n"
        else:
            text += f"<|Bot|>:{message['content']}<eoa>\\n"
    text += "<|Bot|>:"
    return tokenizer.encode(text)          # [<s>] + the whole text, encoded at once


preset = internlm_7b(vocab_size=151936)
weights = preset.num_parameters() * 2                  # bfloat16: 2 bytes per parameter
largest = preset.vocab_size * preset.hidden_size * 2   # the biggest tensor: embedding / lm_head
ch15.peak_gib(round((weights + largest) / 2**30, 2))
ch15.internlm_prompt(internlm_prompt)
''',
}

WRONG = {
    ("ch15.peak_gib", "ch15.internlm_prompt"): ('''from course_lib.check import ch15


def internlm_prompt(tokenizer, messages):
    # messages: [{"role": "user" or "assistant", "content": str}, ...]; the last one is the user's
    text = ""
    for message in messages:
        if message["role"] == "user":
            text += f"<|User|>:{message['content']}<eoh>\\n"
        else:
            text += f"<|Bot|>:{message['content']}<eoa>\\n"
    text += "<|Bot|>:"
    return tokenizer.encode(text)          # [<s>] + the whole text, encoded at once


preset = internlm_7b(vocab_size=151936)
weights = preset.num_parameters() * 2                  # bfloat16: 2 bytes per parameter
ch15.peak_gib(round(weights / 2**30, 2))
ch15.internlm_prompt(internlm_prompt)
''', {"ch15.peak_gib": "正在搬运的那一个张量"}),
}
