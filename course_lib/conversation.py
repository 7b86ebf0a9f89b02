"""Chat with a real checkpoint in its OWN format: the exact prompt token ids its chat model
was fine-tuned on, its stop ids, and text streamed as it is generated.

Baichuan-13B-Chat (``modeling_baichuan.py``, ``BaichuanForCausalLM._build_chat_input``;
ids from its ``generation_config.json``)::

    for each message: [user_token_id=195] + encode(content)      (role "user")
                      [assistant_token_id=196] + encode(content) (role "assistant")
    then [196] — the model writes the answer and ends it with eos_token_id=2.
    History is dropped from the oldest round when longer than
    max(model_max_length // 2, model_max_length - max_new_tokens) tokens (left-truncated).

InternLM-chat-7b (``modeling_internlm.py``, ``InternLMForCausalLM.build_inputs`` in
InternLM/InternLM ``tools/transformers``)::

    prompt = "".join(f"<|User|>:{q}<eoh>\\n<|Bot|>:{a}<eoa>\\n" for q, a in history)
             + f"<|User|>:{query}<eoh>\\n<|Bot|>:"
    ids = tokenizer(prompt)  ->  [<s>=1] + sp.encode(prompt)
    stop at </s> (2) or <eoa> (103028 in the real vocabulary), as its users pass
    ``eos_token_id=(2, 103028)``; the reply is the text before "<eoa>".

Decoding reuses ``course_lib.generation``'s engine (``prefill``/``decode_step``/
``next_token_scores``) one token at a time, and ``hf_tokenizer.StreamDecoder`` so that a
character split over byte tokens is never printed half.
"""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

from . import generation

ROLES = ("user", "assistant")

# C0 control characters except newline and tab, printed as "\x06": a random or badly trained
# model can emit them (byte-fallback tokens <0x00>..<0x1F>), and printed raw they are invisible,
# overwrite the line ("\r") or drive the terminal ("\x1b[...").
_SHOWN = str.maketrans({chr(c): f"\\x{c:02x}" for c in range(0x20) if chr(c) not in "\n\t"})


def printable(text: str) -> str:
    """``text`` as the streamed reply is printed: C0 control characters other than newline and
    tab escaped (``"\\x06"``); everything else unchanged. The returned reply stays raw."""
    return text.translate(_SHOWN)


def _check_messages(messages) -> list[dict]:
    if not messages or not isinstance(messages, (list, tuple)):
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts.")
    for m in messages:
        if not isinstance(m, dict) or m.get("role") not in ROLES or not isinstance(m.get("content"), str):
            raise ValueError(f"Bad message {m!r}: each needs role 'user' or 'assistant' and a "
                             "string content (no 'system' role in these first-generation chats).")
    if messages[-1]["role"] != "user":
        raise ValueError("The last message must be the user's: the model answers it.")
    return list(messages)


def baichuan_prompt(tokenizer, messages, gen_cfg: dict, model_max_length: int,
                    max_new_tokens: int) -> list[int]:
    """Baichuan-13B-Chat's ``_build_chat_input``: newest rounds first, left-truncated."""
    user, assistant = gen_cfg.get("user_token_id", 195), gen_cfg.get("assistant_token_id", 196)
    max_input = max(model_max_length // 2, model_max_length - max_new_tokens)
    total, round_ids = [], []
    for m in reversed(_check_messages(messages)):
        content = tokenizer.encode(m["content"])
        if m["role"] == "user":
            round_ids = [user] + content + round_ids
            if total and len(total) + len(round_ids) > max_input:
                break
            total = round_ids + total
            if len(total) >= max_input:
                break
            round_ids = []
        else:
            round_ids = [assistant] + content + round_ids
    return total[-max_input:] + [assistant]


def internlm_prompt(tokenizer, messages) -> list[int]:
    """InternLM-chat's ``build_inputs``: the text template, then ``tokenizer(prompt)``."""
    messages = _check_messages(messages)
    text = ""
    for m in messages[:-1]:
        text += (f"<|User|>:{m['content']}<eoh>\n<|Bot|>:" if m["role"] == "user"
                 else f"{m['content']}<eoa>\n")
    if len(messages) > 1 and messages[-2]["role"] == "user":
        raise ValueError("Two user messages in a row: InternLM's format pairs each user turn "
                         "with an assistant answer.")
    return tokenizer.encode(text + f"<|User|>:{messages[-1]['content']}<eoh>\n<|Bot|>:")


def chat_format(model, tokenizer, messages, max_new_tokens: int = 64) -> tuple[list[int], set]:
    """(prompt ids, stop ids) of ``model.family`` for ``messages``."""
    family = getattr(model, "family", None)
    gen_cfg = getattr(model, "generation_config", {}) or {}
    if family == "baichuan-13b":
        length = (getattr(model, "hf_config", {}) or {}).get("model_max_length", model.config.max_seq_len)
        ids = baichuan_prompt(tokenizer, messages, gen_cfg, length, max_new_tokens)
        return ids, {int(gen_cfg.get("eos_token_id", tokenizer.eos_id))}
    if family == "internlm":
        return internlm_prompt(tokenizer, messages), {tokenizer.eos_id, tokenizer.token_to_id("<eoa>")}
    raise ValueError(f"No chat format for family {family!r}: Baichuan-13B-Chat and "
                     "InternLM-chat-7b have one; base models (Baichuan-7B...) only continue text "
                     "(use course_lib.generation.generate).")


def stream_chat(model, tokenizer, messages, max_new_tokens: int = 64, *, do_sample: bool = False,
                temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                repetition_penalty: float = 1.0, seed: int = 0) -> Iterator[str]:
    """Yield the reply piece by piece (complete characters only) until a stop id."""
    ids, stop = chat_format(model, tokenizer, messages, max_new_tokens)
    if len(ids) + max_new_tokens > model.config.max_seq_len:
        raise ValueError(f"prompt ({len(ids)} tokens) + max_new_tokens ({max_new_tokens}) "
                         f"exceed max_seq_len={model.config.max_seq_len}.")
    rng = np.random.default_rng(seed)
    decoder = tokenizer.stream()
    seen = np.zeros(model.config.vocab_size, bool)
    seen[ids] = True
    state = generation.prefill(model, [ids])
    for step in range(max_new_tokens):
        scores = generation.next_token_scores(state.logits, seen[None], temperature=temperature,
                                              top_k=top_k, top_p=top_p,
                                              repetition_penalty=repetition_penalty)[0]
        token = (int(rng.choice(len(scores), p=generation.softmax(scores)))
                 if do_sample else int(np.argmax(scores)))
        if token in stop:
            return
        seen[token] = True
        piece = decoder.put(token)
        if piece:
            yield piece
        if step < max_new_tokens - 1:
            generation.decode_step(model, state, [token])


def chat(model, tokenizer, messages, max_new_tokens: int = 64, *,
         on_text: Callable[[str], None] | None = print, **sampling) -> str:
    """The reply to ``messages`` in the model's own chat format, streamed to ``on_text``
    (default: printed as it comes, control characters escaped by :func:`printable`; ``None``:
    silent). Greedy unless ``do_sample=True``. Returns the raw reply."""
    pieces = []
    for piece in stream_chat(model, tokenizer, messages, max_new_tokens, **sampling):
        pieces.append(piece)
        if on_text is print:
            print(printable(piece), end="", flush=True)
        elif on_text is not None:
            on_text(piece)
    if on_text is print:
        print()
    return "".join(pieces)
