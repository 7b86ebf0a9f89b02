"""Chat with a real checkpoint in its OWN format: the exact prompt token ids its chat model
was fine-tuned on, its stop ids, and text streamed as it is generated.

Baichuan-13B-Chat (``modeling_baichuan.py``, ``BaichuanForCausalLM._build_chat_input``;
ids from its ``generation_config.json``)::

    for each message: [user_token_id=195] + encode(content)                     (role "user")
                      [assistant_token_id=196] + encode(content) + [eos_token_id=2] (role "assistant")
    then [196] — the model writes the answer and ends it with eos_token_id=2.
    (Baichuan2's ``generation_utils.build_chat_input`` puts no eos after a history answer;
    this is the 13B model's own file, which its ``chat()`` calls.)
    History is dropped from the oldest round when longer than
    max(model_max_length // 2, model_max_length - max_new_tokens) tokens (left-truncated).

InternLM-chat-7b (``InternLMForCausalLM.build_inputs`` as a develop-branch revision of
InternLM/InternLM ``tools/transformers/modeling_internlm.py`` writes it: commit 0241457,
2023-09-22, lines 769-774; every main-branch revision, fa7337b to aaaf4d7 (lines 779-786),
writes a literal "<s>" before each history round and before a lone query instead, which
this module does not reproduce)::

    prompt = "".join(f"<|User|>:{q}<eoh>\\n<|Bot|>:{a}<eoa>\\n" for q, a in history)
             + f"<|User|>:{query}<eoh>\\n<|Bot|>:"
    ids = tokenizer(prompt)  ->  [<s>=1] + sp.encode(prompt)
    stop at </s> (2) or <eoa> (103028 in the real vocabulary), as its users pass
    ``eos_token_id=(2, 103028)``; the reply is the text before "<eoa>".

Newer families (prompt text built from the tokenizer's own special tokens, then encoded with
added tokens parsed, ``add_special_tokens=False``; stop ids = ``generation_config.json``'s
``eos_token_id`` + the family's end-of-turn token):

* ``qwen2``: ChatML ``<|im_start|>role\ncontent<|im_end|>\n`` ... ``<|im_start|>assistant\n``,
  no BOS; without a system message, Qwen2.5's default "You are Qwen, created by Alibaba Cloud.
  You are a helpful assistant." (chat_template of Qwen/Qwen2.5-*-Instruct
  ``tokenizer_config.json``; Qwen2's "You are a helpful assistant." if the directory's
  template says that). Stop: ``<|im_end|>`` + ``eos_token_id``.
* ``qwen3``: the same ChatML, no default system; earlier answers lose their ``<think>``
  block; ``enable_thinking=False`` appends ``<think>\n\n</think>\n\n`` (the template's own
  rule); the default (``None``/``True``) is thinking ON: nothing appended, the model opens
  ``<think>`` itself (Qwen/Qwen3-0.6B chat_template, as copied in ggml-org/llama.cpp
  ``models/templates/Qwen-Qwen3-0.6B.jinja``). Tool turns are refused.
* ``llama3``: ``<|begin_of_text|>`` + ``<|start_header_id|>role<|end_header_id|>\n\n`` +
  content.strip() + ``<|eot_id|>`` per message + the assistant header. Llama-3.1/3.2
  (recognised by ``rope_scaling.rope_type == "llama3"`` in config.json) always write the
  system header "Cutting Knowledge Date: December 2023\nToday Date: {date_string}\n\n" +
  system; ``date_string`` defaults to "26 Jul 2024" (the 3.1 template's default; the 3.2
  template renders today's date when ``strftime_now`` exists: pass ``date_string`` to match).
  Tools / ipython roles are not supported. Stop: ``<|eot_id|>`` + ``eos_token_id``.
* ``llama2``: Meta's ``chat_completion`` (meta-llama/llama ``llama/generation.py``) and the
  HF chat_template: each answered round ``[<s>] + encode("[INST] q [/INST] a ") + [</s>]``,
  then ``[<s>] + encode("[INST] q [/INST]")``; a system message is put in the first user turn
  as ``<<SYS>>\n...\n<</SYS>>\n\n``; roles must alternate. Stop: ``</s>``.
* ``internlm2``: ``<s>`` (as an id) + the ChatML turns; no default system (the template's rule;
  ``modeling_internlm2.py``'s ``chat()`` passes its own ``meta_instruction``, not added here).
  Stop: ``<|im_end|>`` + ``</s>`` + ``eos_token_id``.
* ``baichuan2-7b``/``baichuan2-13b``: ``generation_utils.build_chat_input`` of
  baichuan-inc/Baichuan2-*-Chat: ``encode(system)`` + rounds (newest first while they fit
  ``model_max_length - max_new_tokens - len(system)``) with ``user_token_id``/
  ``assistant_token_id`` from ``generation_config.json``, then ``assistant_token_id``,
  left-truncated. Its tokenizer_config is said to set ``add_bos_token`` false (unverified, see
  below; the directory's own file decides). Stop: ``eos_token_id``.

Checked against public sources (read, not copied), and what could not be checked:

* llama2 — confirmed: meta-llama/llama ``llama/generation.py`` @ 689c7f261b9c
  (``B_INST``/``E_INST``, ``B_SYS = "<<SYS>>\\n"``, ``E_SYS = "\\n<</SYS>>\\n\\n"``, the system
  text not stripped but the whole first turn ``.strip()``-ed, answered rounds
  ``encode(..., bos=True, eos=True)``, the last ``bos=True, eos=False``). The HF chat_template
  text is only seen in third-party copies (same ``bos_token + '[INST] ' + content.strip() +
  ' [/INST]'`` / ``' ' + content.strip() + ' ' + eos_token``), not in a mirror of
  meta-llama/Llama-2-7b-chat-hf itself.
* internlm2 — confirmed: the ids ``<|im_start|>`` 92543, ``<|im_end|>`` 92542 (and 92538-92541
  for the tool tokens) in InternLM/InternLM ``chat/chat_format.md`` @ fe4c2eb273c6; its
  ``chat/web_demo.py`` writes ``<s><|im_start|>system...`` and stops on
  ``additional_eos_token_id=92542``; ``modeling_internlm2.py`` ``build_inputs`` puts the BOS
  text in the prompt only when ``tokenizer.add_bos_token`` is false (else the tokenizer adds
  it) and ``chat()`` stops on ``[tokenizer.eos_token_id, <|im_end|>]`` (copy in a public
  repo). The chat_template ``{{ bos_token }}`` + ChatML turns and the six
  ``additional_special_tokens`` are seen only in third-party copies of an InternLM2
  tokenizer_config.json, NOT in a mirror of internlm/internlm2_5-1_8b-chat or
  internlm2-chat-7b: unverified for those exact repos. Their generation_config.json
  ``eos_token_id`` ([2, 92542]?) is UNVERIFIED (opencompass passes ``[2, 92542]`` for
  internlm2-chat-7b by hand); the stop set here is the same either way, since ``<|im_end|>``
  and ``</s>`` are always added.
* llama3 — the 3.0 template (BOS on the first message, every content ``| trim``) matches the
  many third-party copies of Meta-Llama-3-8B-Instruct's template; no mirror of the HF repo
  itself was found. Llama-3.1/3.2 ``eos_token_id`` ``[128001, 128008, 128009]``: seen only in
  third-party copies of the generation/config files: unverified against meta-llama's repos.
* baichuan2 — ``build_chat_input`` confirmed against copies of baichuan-inc/Baichuan2-13B-Chat
  ``generation_utils.py`` (one pinned to HF commit 99fe8c0fb8bf); 195/196 confirmed by
  baichuan-inc/Baichuan2 ``fine-tune/fine-tune.py`` @ ed1cf0f59837 (``user_tokens=[195]``,
  ``assistant_tokens=[196]``); ``eos_token_id`` 2 / ``max_new_tokens`` 2048 seen only in
  copies of a Baichuan generation_config.json. Baichuan2-7B-Chat's tokenizer_config.json
  (``add_bos_token``/``add_eos_token`` false?) was NOT found: UNVERIFIED. The loader reads the
  flags from the directory's own file, so a real checkpoint is encoded by what it says.
* qwen2 — the Qwen2.5 template text (default system, ChatML) is seen in many third-party
  copies; no public repo+path holding Qwen/Qwen2.5-0.5B-Instruct's tokenizer_config.json was
  found (QwenLM/Qwen2.5 @ 77fb0c1e20ee has only docs: ``eos_token_id=[151645, 151643]`` in
  ``docs/source/inference/transformers.md``): the exact source copy is UNVERIFIED.

Decoding reuses ``course_lib.generation``'s compiled engine (``compiled_prefill``, then
``decode_step`` and ``next_token_scores`` one token at a time: each step's logits come to
the host, for sampling and streaming), and ``hf_tokenizer.StreamDecoder`` so that a
character split over byte tokens is never printed half.
"""
from __future__ import annotations

from typing import Callable, Iterator

import numpy as np

from . import generation
from .layers import CausalLM

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
    eos = gen_cfg.get("eos_token_id", 2)
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
            round_ids = [assistant] + content + [eos] + round_ids
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


QWEN25_DEFAULT_SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."
QWEN2_DEFAULT_SYSTEM = "You are a helpful assistant."
LLAMA3_DEFAULT_DATE = "26 Jul 2024"
FAMILIES = ("baichuan-13b", "internlm", "qwen2", "qwen3", "llama3", "llama2", "internlm2",
            "baichuan2-7b", "baichuan2-13b")


def _split_system(messages, family: str):
    """(system text or None, the other messages), checked; only a leading system is allowed."""
    messages = list(messages or [])
    system = None
    if messages and isinstance(messages[0], dict) and messages[0].get("role") == "system":
        system = messages[0].get("content")
        if not isinstance(system, str):
            raise ValueError("The system message's content must be a string.")
        messages = messages[1:]
    try:
        return system, _check_messages(messages)
    except ValueError as e:
        raise ValueError(f"{e} ({family}: one optional leading 'system' message, then "
                         "'user'/'assistant' messages ending with the user's.)") from None


def _require_tokens(tokenizer, family: str, *names) -> None:
    for name in names:
        try:
            tokenizer.token_to_id(name)
        except KeyError:
            raise ValueError(f"The tokenizer has no {name!r} token, which the {family} chat "
                             "format needs: load the tokenizer of the chat checkpoint "
                             "(load_hf_tokenizer(model_dir)).") from None


def _stop_ids(tokenizer, gen_cfg: dict, *names) -> set:
    """eos_token_id of generation_config.json (an int or a list) + the named end tokens."""
    eos = gen_cfg.get("eos_token_id", tokenizer.eos_id)
    stop = set(eos if isinstance(eos, (list, tuple)) else [eos]) | {tokenizer.eos_id}
    stop |= {tokenizer.token_to_id(n) for n in names}
    return {int(i) for i in stop if i is not None}


def _qwen2_default_system(tokenizer) -> str:
    """Qwen2.5's template default when the tokenizer's config carries it or no template is
    known; Qwen2-Instruct's "You are a helpful assistant." when its template says that."""
    template = getattr(tokenizer, "chat_template", None) or ""
    if QWEN25_DEFAULT_SYSTEM not in template and QWEN2_DEFAULT_SYSTEM in template:
        return QWEN2_DEFAULT_SYSTEM
    return QWEN25_DEFAULT_SYSTEM


def chatml_text(messages, family: str, default_system: str | None = None,
                enable_thinking: bool | None = None) -> str:
    """The ChatML text of Qwen2/Qwen2.5 (``default_system`` when no system message), Qwen3
    (no default; earlier answers lose their ``<think>`` block; ``enable_thinking=False``
    appends an empty one) and InternLM2 (no default; the BOS is added as an id)."""
    system, turns = _split_system(messages, family)
    system = default_system if system is None else system
    text = "" if system is None else f"<|im_start|>system\n{system}<|im_end|>\n"
    for m in turns:
        content = m["content"]
        if family == "qwen3" and m["role"] == "user" and content.startswith(
                "<tool_response>") and content.endswith("</tool_response>"):
            raise ValueError("Tool responses are not supported in this course's Qwen3 format.")
        if family == "qwen3" and m["role"] == "assistant" and "</think>" in content:
            content = content.split("</think>")[-1].lstrip("\n")
        text += f"<|im_start|>{m['role']}\n{content}<|im_end|>\n"
    text += "<|im_start|>assistant\n"
    if family == "qwen3" and enable_thinking is False:
        text += "<think>\n\n</think>\n\n"
    return text


def llama3_text(tokenizer, messages, dated: bool, date_string: str | None = None) -> str:
    """Llama-3 Instruct; ``dated`` (3.1+): the system header with the knowledge cutoff and
    ``date_string`` is always written, the system message (if any) after it."""
    system, turns = _split_system(messages, "llama3")
    bos = tokenizer.decode([tokenizer.bos_id], skip_special_tokens=False)
    head = "<|start_header_id|>{}<|end_header_id|>\n\n"
    text = bos
    if dated:
        text += (head.format("system") + "Cutting Knowledge Date: December 2023\n"
                 f"Today Date: {date_string or LLAMA3_DEFAULT_DATE}\n\n"
                 + (system or "").strip() + "<|eot_id|>")
    elif system is not None:
        text += head.format("system") + system.strip() + "<|eot_id|>"
    for m in turns:
        text += head.format(m["role"]) + m["content"].strip() + "<|eot_id|>"
    return text + head.format("assistant")


def llama2_prompt(tokenizer, messages) -> list[int]:
    """Llama-2-chat (Meta's ``chat_completion``): each answered round is
    ``[<s>] + encode("[INST] q [/INST] a ") + [</s>]``, then ``[<s>] + encode("[INST] q [/INST]")``;
    a system message goes into the first user turn inside ``<<SYS>>`` ... ``<</SYS>>``."""
    system, turns = _split_system(messages, "llama2")
    if any(m["role"] != ("user", "assistant")[n % 2] for n, m in enumerate(turns)):
        raise ValueError("Llama-2-chat needs alternating roles: user, assistant, user, ...")
    if system is not None:
        turns[0] = {"role": "user",
                    "content": f"<<SYS>>\n{system}\n<</SYS>>\n\n{turns[0]['content']}"}
    ids = []
    for q, a in zip(turns[0::2], turns[1::2]):
        ids += ([tokenizer.bos_id] + tokenizer.encode(
            f"[INST] {q['content'].strip()} [/INST] {a['content'].strip()} ",
            add_special_tokens=False) + [tokenizer.eos_id])
    last = turns[-1]["content"].strip()
    return ids + [tokenizer.bos_id] + tokenizer.encode(f"[INST] {last} [/INST]",
                                                       add_special_tokens=False)


def baichuan2_prompt(tokenizer, messages, gen_cfg: dict, model_max_length: int,
                     max_new_tokens: int) -> list[int]:
    """Baichuan2-*-Chat's ``build_chat_input``: encode(system), then rounds newest first while
    they fit, then ``assistant_token_id``; left-truncated to model_max_length - max_new_tokens."""
    system, turns = _split_system(messages, "baichuan2")
    for key in ("user_token_id", "assistant_token_id"):
        if key not in gen_cfg:
            raise ValueError(f"generation_config.json has no {key}: copy it from the "
                             "Baichuan2-*-Chat repo next to config.json.")
    max_input = model_max_length - (max_new_tokens or gen_cfg.get("max_new_tokens", 0))
    system_ids = tokenizer.encode(system or "")
    max_history = max_input - len(system_ids)
    rounds, history = [], []
    for m in turns:
        if m["role"] == "user" or not rounds:
            rounds.append([])
        rounds[-1] += [gen_cfg[f"{m['role']}_token_id"]] + tokenizer.encode(m["content"])
    for round_ids in reversed(rounds):
        if history and len(history) + len(round_ids) > max_history:
            break
        history = round_ids + history
        if len(history) >= max_history:
            break
    return (system_ids + history + [gen_cfg["assistant_token_id"]])[-max_input:]


def _text_ids(tokenizer, text: str, bos: bool = False) -> list[int]:
    return [tokenizer.bos_id] * bos + tokenizer.encode(text, add_special_tokens=False)


def chat_format(model, tokenizer, messages, max_new_tokens: int = 64, *,
                enable_thinking: bool | None = None,
                date_string: str | None = None) -> tuple[list[int], set]:
    """(prompt ids, stop ids) of ``model.family`` for ``messages``. ``enable_thinking``: Qwen3
    only (default: the template's, thinking on). ``date_string``: Llama-3.1+ only
    (default "26 Jul 2024", the 3.1 template's own)."""
    family = getattr(model, "family", None)
    gen_cfg = getattr(model, "generation_config", {}) or {}
    hf_cfg = getattr(model, "hf_config", {}) or {}
    if enable_thinking is not None and family != "qwen3":
        raise ValueError(f"enable_thinking is a Qwen3 template switch; {family!r} has none.")
    if date_string is not None and family != "llama3":
        raise ValueError(f"date_string is for Llama-3.1+ templates, not {family!r}.")
    if family == "baichuan-13b":
        length = hf_cfg.get("model_max_length", model.config.max_seq_len)
        ids = baichuan_prompt(tokenizer, messages, gen_cfg, length, max_new_tokens)
        return ids, {int(gen_cfg.get("eos_token_id", tokenizer.eos_id))}
    if family == "internlm":
        return internlm_prompt(tokenizer, messages), {tokenizer.eos_id, tokenizer.token_to_id("<eoa>")}
    if family in ("qwen2", "qwen3", "internlm2"):
        _require_tokens(tokenizer, family, "<|im_start|>", "<|im_end|>")
        default = _qwen2_default_system(tokenizer) if family == "qwen2" else None
        text = chatml_text(messages, family, default, enable_thinking)
        return _text_ids(tokenizer, text, bos=family == "internlm2"), _stop_ids(
            tokenizer, gen_cfg, "<|im_end|>")
    if family == "llama3":
        _require_tokens(tokenizer, family, "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
        dated = (hf_cfg.get("rope_scaling") or {}).get("rope_type") == "llama3"
        if date_string is not None and not dated:
            raise ValueError("date_string: Llama-3.0's template has no date header.")
        return (_text_ids(tokenizer, llama3_text(tokenizer, messages, dated, date_string)),
                _stop_ids(tokenizer, gen_cfg, "<|eot_id|>"))
    if family == "llama2":
        return llama2_prompt(tokenizer, messages), _stop_ids(tokenizer, gen_cfg)
    if family in ("baichuan2-7b", "baichuan2-13b"):
        length = hf_cfg.get("model_max_length", model.config.max_seq_len)
        return (baichuan2_prompt(tokenizer, messages, gen_cfg, length, max_new_tokens),
                _stop_ids(tokenizer, gen_cfg))
    raise ValueError(f"No chat format for family {family!r}: chat formats exist for "
                     f"{', '.join(FAMILIES)}; base models (Baichuan-7B...) only continue text "
                     "(use course_lib.generation.generate).")


def stream_chat(model, tokenizer, messages, max_new_tokens: int = 64, *, do_sample: bool = False,
                temperature: float = 1.0, top_k: int = 0, top_p: float = 1.0,
                repetition_penalty: float = 1.0, seed: int = 0,
                enable_thinking: bool | None = None,
                date_string: str | None = None) -> Iterator[str]:
    """Yield the reply piece by piece (complete characters only) until a stop id."""
    ids, stop = chat_format(model, tokenizer, messages, max_new_tokens,
                            enable_thinking=enable_thinking, date_string=date_string)
    if len(ids) + max_new_tokens > model.config.max_seq_len:
        raise ValueError(f"prompt ({len(ids)} tokens) + max_new_tokens ({max_new_tokens}) "
                         f"exceed max_seq_len={model.config.max_seq_len}.")
    rng = np.random.default_rng(seed)
    decoder = tokenizer.stream()
    seen = np.zeros(model.config.vocab_size, bool)
    seen[ids] = True
    state = _prefill(model, ids, max_new_tokens)
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


def _prefill(model, ids, max_new_tokens: int):
    """The prompt's decode state. A course model (``layers.CausalLM``) gets the compiled
    engine, as in ``generate``: the prompt padded to ``prefill_width``, a cache bucket of
    slots, and every later ``decode_step`` one call of the compiled step. Anything else (the
    scripted stand-ins of tests/test_conversation.py) is run by the PyNative prefill."""
    if not isinstance(model, CausalLM):
        return generation.prefill(model, [ids])
    return generation.prefill_for(model, [ids], max_new_tokens)


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
