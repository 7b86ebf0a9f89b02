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
    # turn, [assistant_token_id] + encode(content) per answer, then [assistant_token_id];
    # BaichuanTokenizer.encode adds <s>=1 (add_bos_token defaults to True).
    want = ([195, 1] + sp.encode("你好") + [196, 1] + sp.encode("有什么事？")
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
