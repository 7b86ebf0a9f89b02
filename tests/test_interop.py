"""course_lib.interop: the course InternLM leaves a clean process in Hugging Face layout and
is reproduced by independent implementations — HF transformers on real torch (in this
process, which never imports mindnlp) and mindnlp's Llama (in a subprocess)."""
import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from course_lib import interop
from course_lib.runtime import Isolated

IDS = [[5, 6, 7, 8, 9, 10, 11], [1, 40, 41, 42, 43, 44, 45]]
PROMPT = [5, 6, 7]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    out = tmp_path_factory.mktemp("hf")
    pending = interop.export_course_model(out, IDS, prompt_ids=PROMPT, max_new_tokens=6,
                                          pretrained=False, seed=3, background=True)
    assert isinstance(pending, Isolated)      # returned at once, work runs meanwhile
    return out, pending.result()


def test_export_writes_hf_layout_and_references(exported):
    out, info = exported
    assert (out / "config.json").exists() and (out / "model.safetensors").exists()
    assert info["logits"].shape == (2, 7, 8000)
    assert len(info["generated"]) <= 6
    c = info["llama_config"]
    assert c["attention_bias"] is True and c["tie_word_embeddings"] is False
    assert c["num_key_value_heads"] == c["num_attention_heads"]
    v, h, i, n = c["vocab_size"], c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
    # embedding + head, per layer q/k/v/o with biases + gate/up/down + 2 norms, final norm
    assert info["parameters"] == 2 * v * h + n * (4 * h * h + 4 * h + 3 * h * i + 2 * h) + h


def test_hf_transformers_on_real_torch_reproduces_the_course_model(exported):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    assert "mindnlp" not in sys.modules
    out, info = exported
    model = transformers.LlamaForCausalLM.from_pretrained(
        out, config=transformers.LlamaConfig(**info["llama_config"]), torch_dtype=torch.float32)
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor(IDS)).logits.numpy()
        gen = model.generate(torch.tensor([PROMPT]), max_new_tokens=6, do_sample=False,
                             eos_token_id=info["eos_id"], pad_token_id=info["pad_id"])
    assert np.abs(logits - info["logits"]).max() < 1e-4
    assert gen[0, len(PROMPT):].tolist() == info["generated"]


def test_course_logits_round_trip(exported):
    out, info = exported
    np.testing.assert_allclose(interop.course_logits(out, IDS), info["logits"], atol=1e-5)


def test_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="has no config.json"):
        interop.course_logits(tmp_path, IDS)
    with pytest.raises(ValueError, match="2-D"):
        interop.export_course_model(tmp_path, [1, 2, 3])
    (tmp_path / "config.json").write_text('{"model_type": "gpt2"}')
    with pytest.raises(RuntimeError, match=r"_logits in a fresh process failed \(exit code 1\)"):
        interop.course_logits(tmp_path, IDS)


MINDNLP_CHECK = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    os.environ["DIFFUSERS_VERBOSITY"] = "error"
    import mindnlp, torch                      # torch is now mindnlp's mindtorch
    from mindnlp.transformers import LlamaConfig, LlamaForCausalLM
    out, ids = sys.argv[1], json.loads(sys.argv[2])
    info = json.load(open(os.path.join(out, "reference.json")))
    model = LlamaForCausalLM.from_pretrained(out, config=LlamaConfig(**info["llama_config"]))
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor(ids)).logits.numpy()
    ref = np.load(os.path.join(out, "reference_logits.npy"))
    print("RESULT", json.dumps({"max_diff": float(np.abs(logits - ref).max()),
                                "torch_is_mindtorch": torch.__name__ == "torch" and "mindtorch" in torch.__file__}))
""")


@pytest.mark.slow
def test_mindnlp_llama_with_attention_bias_is_the_course_internlm(exported):
    """In a subprocess: mindnlp patches MindSpore process-wide and must never enter pytest."""
    out, _ = exported
    proc = subprocess.run([sys.executable, "-c", MINDNLP_CHECK, str(out), json.dumps(IDS)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    assert result["torch_is_mindtorch"]
    assert result["max_diff"] < 1e-4
    assert "mindnlp" not in sys.modules


def test_two_exports_into_one_directory_each_get_their_own_results(tmp_path):
    """Two kernels (or a kernel and the gradebook) exporting into the same directory at once:
    each call returns the logits of its own input ids, whichever of them wrote last."""
    short = interop.export_course_model(tmp_path, [[1, 2, 3]], pretrained=False, seed=3, background=True)
    long = interop.export_course_model(tmp_path, [[4, 5, 6, 7, 8]], pretrained=False, seed=3, background=True)
    long_info, short_info = long.result(), short.result()
    assert short_info["logits"].shape[:2] == (1, 3) and long_info["logits"].shape[:2] == (1, 5)
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]   # no half-written files left
