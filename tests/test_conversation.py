"""chat(): each family's exact prompt ids (written out from the repos' code), its stop ids,
streaming without half characters — on the look-alike tokenizers."""
import numpy as np
import pytest
import sentencepiece as spm
from mindspore import Tensor

from course_lib import chat, load_hf_tokenizer, lookalike
from course_lib.conversation import chat_format
from course_lib.internlm import tiny

MESSAGES = [{"role": "user", "content": "你好"}, {"role": "assistant", "content": "有什么事？"},
            {"role": "user", "content": "讲个故事"}]


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    out = {}
    for family in ("baichuan-13b", "internlm"):
        d = tmp_path_factory.mktemp(family)
        lookalike.train_tokenizer(d, family)
        lookalike._tokenizer_files(d, family)
        out[family] = d
    return out


class ScriptedModel:
    """Stands in for the network: records the prompt it is given and then 'predicts' a fixed
    sequence of tokens (one-hot logits), so stop ids and streaming are tested exactly."""

    def __init__(self, family, vocab_size, script, generation_config=None):
        self.family, self.script, self.calls = family, list(script), []
        self.generation_config = generation_config or {}
        self.hf_config = {"model_max_length": 4096}
        self.config = tiny(vocab_size=vocab_size, max_seq_len=4096)

    def new_cache(self):
        return object()

    def __call__(self, ids, attention_mask=None, cache=None, last_only=False):
        self.calls.append(ids.asnumpy().tolist())
        logits = np.zeros((ids.shape[0], 1, self.config.vocab_size), np.float32)
        logits[:, -1, self.script[len(self.calls) - 1]] = 1.0
        return Tensor(logits)


def test_baichuan_prompt_ids_are_the_real_format(dirs):
    d = dirs["baichuan-13b"]
    sp = spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))
    # modeling_baichuan._build_chat_input: [user_token_id] + tokenizer.encode(content) per user
    # turn, [assistant_token_id] + encode(content) + [eos_token_id] per answer, then
    # [assistant_token_id]; BaichuanTokenizer.encode adds <s>=1 (add_bos_token defaults to True).
    want = ([195, 1] + sp.encode("你好") + [196, 1] + sp.encode("有什么事？") + [2]
            + [195, 1] + sp.encode("讲个故事") + [196])
    tok = load_hf_tokenizer(d)
    model = ScriptedModel("baichuan-13b", tok.vocab_size, [2],
                          {"user_token_id": 195, "assistant_token_id": 196, "eos_token_id": 2})
    ids, stop = chat_format(model, tok, MESSAGES)
    assert ids == want and stop == {2}
    assert chat(model, tok, MESSAGES, on_text=None) == ""         # eos first: empty reply
    assert model.calls[0] == [want]                               # the network saw exactly that


def test_internlm_prompt_ids_are_the_real_format(dirs):
    d = dirs["internlm"]
    sp = spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))
    # modeling_internlm.build_inputs + tokenizer([prompt]): <s> then the text template
    prompt = "<|User|>:你好<eoh>\n<|Bot|>:有什么事？<eoa>\n<|User|>:讲个故事<eoh>\n<|Bot|>:"
    want = [1] + sp.encode(prompt)
    tok = load_hf_tokenizer(d)
    eoh, eoa = sp.piece_to_id("<eoh>"), sp.piece_to_id("<eoa>")
    assert want.count(eoh) == 2 and want.count(eoa) == 1 and 13 in want   # whole pieces, "\n" = 13
    ids, stop = chat_format(ScriptedModel("internlm", tok.vocab_size, []), tok, MESSAGES)
    assert ids == want and stop == {2, eoa}


def test_reply_streams_whole_characters_and_stops_at_eoa(dirs):
    tok = load_hf_tokenizer(dirs["internlm"])
    answer = tok.encode("龘好", add_special_tokens=False)         # 龘: three byte pieces
    eoa = tok.token_to_id("<eoa>")
    model = ScriptedModel("internlm", tok.vocab_size, answer + [eoa] + answer)
    pieces = []
    reply = chat(model, tok, MESSAGES[:1], max_new_tokens=20, on_text=pieces.append)
    assert reply == "龘好" and pieces == ["龘", "好"]              # nothing after <eoa>
    assert len(model.calls) == len(answer) + 1                    # prefill + one step per token


def test_bad_messages_are_refused(dirs):
    tok = load_hf_tokenizer(dirs["internlm"])
    model = ScriptedModel("internlm", tok.vocab_size, [2])
    with pytest.raises(ValueError, match="last message must be the user's"):
        chat_format(model, tok, MESSAGES[:2])
    with pytest.raises(ValueError, match="role 'user' or 'assistant'"):
        chat_format(model, tok, [{"role": "system", "content": "x"}, MESSAGES[0]])
    base = ScriptedModel("baichuan-7b", tok.vocab_size, [2])
    with pytest.raises(ValueError, match="base models"):
        chat_format(base, tok, MESSAGES[:1])


def test_printed_stream_escapes_control_characters(dirs, capsys):
    """A random model can answer with a byte-fallback control character (<0x06>): the printed
    stream shows it as "\\x06" (newline and tab stay as they are); the returned reply is raw."""
    tok = load_hf_tokenizer(dirs["internlm"])
    script = [tok.token_to_id("<0x06>"), *tok.encode("好", add_special_tokens=False),
              tok.token_to_id("<0x0A>"), tok.token_to_id("<0x1B>"), tok.token_to_id("<0x09>"),
              tok.token_to_id("<eoa>")]
    model = ScriptedModel("internlm", tok.vocab_size, script)
    reply = chat(model, tok, MESSAGES[:1], max_new_tokens=10)
    assert reply == "\x06好\n\x1b\t"
    assert capsys.readouterr().out == "\\x06好\n\\x1b\t\n"


# ---- the new families: prompt == the text each repo's own chat template renders ----
from test_hf_tokenizer import make_sp_dir, new_dirs  # noqa: E402,F401  (the same tokenizer directories)

M3 = [{"role": "user", "content": "你好"}, {"role": "assistant", "content": "有什么事？"},
      {"role": "user", "content": "讲个故事, please."}]
SYS = [{"role": "system", "content": "你是一个乐于助人的助手。"}] + M3
TURNS = ("<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n有什么事？<|im_end|>\n"
         "<|im_start|>user\n讲个故事, please.<|im_end|>\n<|im_start|>assistant\n")
# Each string below was rendered at development time with jinja2 from the repo's template:
# Qwen2.5: chat_template of Qwen/Qwen2.5-*-Instruct tokenizer_config.json (no tools branch);
# Qwen3: ggml-org/llama.cpp models/templates/Qwen-Qwen3-0.6B.jinja (copy of Qwen/Qwen3-0.6B's),
#   as stored in ye-NX/llama.cpp @ b354d7c9ecb76c97c07098617cdebbdfffa2583e;
# Llama-3.2: ggerganov/llama.cpp models/templates/meta-llama-Llama-3.2-3B-Instruct.jinja
#   @ 7b5e0803c84435e8005725d8f9ddceb5d1820443 (date_string="26 Jul 2024");
# Llama-3/Llama-2/InternLM2: chat_template of meta-llama/Meta-Llama-3-8B-Instruct,
#   meta-llama/Llama-2-7b-chat-hf, internlm/internlm2_5-1_8b-chat tokenizer_config.json.
# Checked (see course_lib/conversation.py docstring): Llama-2 against meta-llama/llama
#   llama/generation.py @ 689c7f261b9c (chat_completion); InternLM2 ids/stops against
#   InternLM/InternLM chat/chat_format.md + chat/web_demo.py @ fe4c2eb273c6; the Llama-3.0,
#   InternLM2 and Qwen2.5 template texts only against third-party copies (the HF repos' own
#   tokenizer_config.json files were not found: unverified).
RENDERED = {
    ("qwen2", False): "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a "
                      "helpful assistant.<|im_end|>\n" + TURNS,
    ("qwen2", True): "<|im_start|>system\n你是一个乐于助人的助手。<|im_end|>\n" + TURNS,
    ("qwen3", False): TURNS,
    ("qwen3", True): "<|im_start|>system\n你是一个乐于助人的助手。<|im_end|>\n" + TURNS,
    ("llama3", False): "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting "
                       "Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
                       "<|start_header_id|>user<|end_header_id|>\n\n你好<|eot_id|><|start_header_id|>"
                       "assistant<|end_header_id|>\n\n有什么事？<|eot_id|><|start_header_id|>user"
                       "<|end_header_id|>\n\n讲个故事, please.<|eot_id|><|start_header_id|>assistant"
                       "<|end_header_id|>\n\n",
    ("llama3-0", True): "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n你是一个乐于"
                        "助人的助手。<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n你好<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\n有什么事？<|eot_id|>"
                        "<|start_header_id|>user<|end_header_id|>\n\n讲个故事, please.<|eot_id|>"
                        "<|start_header_id|>assistant<|end_header_id|>\n\n",
    ("internlm2", True): "<s><|im_start|>system\n你是一个乐于助人的助手。<|im_end|>\n" + TURNS,
    ("llama2", True): "<s>[INST] <<SYS>>\n你是一个乐于助人的助手。\n<</SYS>>\n\n你好 [/INST] 有什么事？ "
                      "</s><s>[INST] 讲个故事, please. [/INST]",
}
GEN = {"qwen2": {"eos_token_id": [151645, 151643]}, "qwen3": {"eos_token_id": [151645, 151643]},
       "llama3": {"eos_token_id": [128001, 128008, 128009]}, "internlm2": {"eos_token_id": [2, 92542]},
       "llama2": {"eos_token_id": 2}}


def _model(family, tok, gen=None, hf=None):
    m = ScriptedModel(family, tok.vocab_size, [tok.eos_id], gen)
    m.hf_config = hf or {"model_max_length": 4096}
    return m


@pytest.mark.parametrize("key", [k for k in RENDERED if k[0] not in ("llama2",)])
def test_text_prompt_is_what_the_repo_template_renders(new_dirs, key):
    family, with_system = key
    dated = family == "llama3"
    family = family.split("-")[0]
    tok = load_hf_tokenizer(new_dirs[family])
    model = _model(family, tok, {}, {"rope_scaling": {"rope_type": "llama3"}} if dated else {})
    ids, stop = chat_format(model, tok, SYS if with_system else M3)
    want = tok.encode(RENDERED[key], add_special_tokens=False)
    if family == "internlm2":                           # "<s>" in the template is the BOS id
        want = [tok.bos_id] + tok.encode(RENDERED[key][len("<s>"):], add_special_tokens=False)
    assert ids == want
    assert tok.decode(ids, skip_special_tokens=False).replace(" ", "") == RENDERED[key].replace(" ", "") \
        or family == "internlm2"
    end = "<|eot_id|>" if family == "llama3" else "<|im_end|>"
    assert tok.token_to_id(end) in stop and tok.eos_id in stop


def test_qwen3_thinking_switch_follows_the_template(new_dirs):
    tok = load_hf_tokenizer(new_dirs["qwen3"])
    model = _model("qwen3", tok, {})
    default, _ = chat_format(model, tok, M3)
    off, _ = chat_format(model, tok, M3, enable_thinking=False)
    assert default == tok.encode(TURNS, False)          # thinking on: the template adds nothing
    assert off == tok.encode(TURNS + "<think>\n\n</think>\n\n", False)
    # an earlier answer loses its <think> block, as the template renders it
    think = [M3[0], {"role": "assistant", "content": "<think>\n想一想\n</think>\n\n有什么事？"}, M3[2]]
    assert chat_format(model, tok, think)[0] == default
    with pytest.raises(ValueError, match="Qwen3 template switch"):
        chat_format(_model("qwen2", tok, {}), tok, M3, enable_thinking=False)


def test_llama2_ids_are_meta_rounds_of_the_template_text(new_dirs):
    d = new_dirs["llama2"]
    sp = spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))
    tok = load_hf_tokenizer(d)
    ids, stop = chat_format(_model("llama2", tok, GEN["llama2"]), tok, SYS)
    # each "<s>...</s>" of the rendered text is one SentencePiece-encoded round (Meta's
    # llama/generation.py chat_completion encodes every round with bos/eos ids)
    text, want = RENDERED[("llama2", True)], []
    for segment in text.split("<s>")[1:]:
        body = segment[:-len("</s>")] if segment.endswith("</s>") else segment
        want += [1] + sp.encode(body) + [2] * segment.endswith("</s>")
    assert ids == want and stop == {2}
    with pytest.raises(ValueError, match="alternating roles"):
        chat_format(_model("llama2", tok), tok, [M3[0], M3[0]])


def test_baichuan2_prompt_is_build_chat_input(new_dirs):
    d = new_dirs["baichuan2-7b"]
    tok = load_hf_tokenizer(d)
    sp = spm.SentencePieceProcessor(model_file=str(d / "tokenizer.model"))
    gen = {"user_token_id": 195, "assistant_token_id": 196, "eos_token_id": 2, "max_new_tokens": 2048}
    # generation_utils.build_chat_input: encode(system) + [195]+encode(q) [196]+encode(a) ... [196];
    # Baichuan2's tokenizer_config.json sets add_bos_token false: no <s> anywhere
    want = (sp.encode("你是一个乐于助人的助手。") + [195] + sp.encode("你好") + [196] + sp.encode("有什么事？")
            + [195] + sp.encode("讲个故事, please.") + [196])
    ids, stop = chat_format(_model("baichuan2-7b", tok, gen), tok, SYS)
    assert ids == want and stop == {2}
    short = _model("baichuan2-13b", tok, gen, {"model_max_length": 64 + 12})
    ids, _ = chat_format(short, tok, M3, max_new_tokens=64)      # 12 tokens of room: only the
    assert ids == ([195] + sp.encode("讲个故事, please.") + [196])[-12:]   # newest round, cut left


def test_system_refused_where_the_format_has_none(new_dirs):
    tok = load_hf_tokenizer(new_dirs["qwen2"])
    with pytest.raises(ValueError, match="role 'user' or 'assistant'"):
        chat_format(_model("qwen2", tok, {}), tok, [M3[0], SYS[0]])   # system not first
    with pytest.raises(ValueError, match="needs"):
        chat_format(_model("llama3", tok, {}), tok, M3)        # Qwen vocabulary: no header ids


def test_internlm2_stops_at_im_end_and_eos_like_its_chat():
    """modeling_internlm2 chat(): eos_token_id=[tokenizer.eos_token_id, <|im_end|>];
    InternLM/InternLM chat/web_demo.py: additional_eos_token_id=92542 (= <|im_end|> in
    chat/chat_format.md). The look-alike ids differ, the rule is the same."""
    import tempfile
    from pathlib import Path
    with tempfile.TemporaryDirectory() as d:
        tok = load_hf_tokenizer(make_sp_dir(Path(d), "internlm2"))
        im_end = tok.token_to_id("<|im_end|>")
        ids, stop = chat_format(_model("internlm2", tok, {"eos_token_id": 2}), tok, M3)
        assert stop == {tok.eos_id, im_end}
        assert ids[0] == tok.bos_id and ids.count(tok.bos_id) == 1          # one BOS, as an id
        assert ids.count(tok.token_to_id("<|im_start|>")) == 4 and ids.count(im_end) == 3
