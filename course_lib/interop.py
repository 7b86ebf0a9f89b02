"""Course models <-> the mindnlp / Hugging Face world, with the course side in a clean process.

``import mindnlp`` replaces hundreds of ``mindspore.Tensor`` methods for the whole process;
afterwards the course's own Cells (plain MindSpore code) no longer run there. A notebook
that uses mindnlp therefore asks *another* process — a fresh interpreter started by
``runtime.run_isolated``, which never imports mindnlp — to run the course models, and the two sides exchange files
in the Hugging Face layout (``config.json`` + ``model.safetensors``) plus ``.npy``/``.json``:

    info = export_course_model(dir, prompt_ids=[...])     # course InternLM -> HF layout + reference outputs
    model = LlamaForCausalLM.from_pretrained(dir, config=LlamaConfig(**info["llama_config"]))   # mindnlp side
    course = course_logits(merged_dir, ids)               # an HF-layout model (e.g. merged) run by the course code

This module itself never imports mindnlp (nor does anything in ``course_lib``).
"""
from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

from .runtime import run_isolated
from .safeio import atomic_write, write_text_atomic

REFERENCE_LOGITS = "reference_logits.npy"
REFERENCE_JSON = "reference.json"


def _ids_array(input_ids) -> np.ndarray:
    ids = np.asarray(input_ids, dtype=np.int32)
    if ids.ndim != 2 or ids.size == 0:
        raise ValueError(f"input_ids must be a non-empty 2-D (batch, seq_len) array, got shape {ids.shape}.")
    return ids


def export_course_model(out_dir, input_ids, prompt_ids=None, max_new_tokens: int = 16,
                        pretrained: bool = True, seed: int = 0, timeout: float = 900,
                        background: bool = False):
    """In a clean process: take the course InternLM-tiny (the zoo's news-pretrained one, or a
    random one with ``seed``), save it in Hugging Face layout to ``out_dir``, and record
    reference outputs: logits for ``input_ids`` and greedy ids for ``prompt_ids``.

    Returns ``{"llama_config": kwargs for LlamaConfig, "logits": array, "generated": ids,
    "eos_id", "pad_id", "parameters", "model"}`` — or, with ``background=True``, a
    ``runtime.Isolated`` at once (the work overlaps with yours; ``.result()`` returns the dict).
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ids = _ids_array(input_ids)
    # this call's own copy of the results: another export into the same out_dir (a second
    # kernel, the gradebook) can replace the files there, never these
    ref_dir = Path(tempfile.mkdtemp(prefix="course_export_"))

    def finish(_):
        try:
            info = json.loads((ref_dir / REFERENCE_JSON).read_text())
            info["logits"] = np.load(ref_dir / REFERENCE_LOGITS)
            return info
        finally:
            shutil.rmtree(ref_dir, ignore_errors=True)

    args = dict(out_dir=str(out_dir), ref_dir=str(ref_dir), input_ids=ids.tolist(),
                prompt_ids=None if prompt_ids is None else [int(i) for i in prompt_ids],
                max_new_tokens=int(max_new_tokens), pretrained=bool(pretrained), seed=int(seed))
    job = run_isolated(_export, timeout=timeout, background=True, then=finish, **args)
    return job if background else job.result()


def course_logits(model_dir, input_ids, timeout: float = 600) -> np.ndarray:
    """Logits of the Hugging Face-layout model in ``model_dir`` (Llama/InternLM/Baichuan
    ``config.json`` + safetensors), computed by the course's own model code in a clean process."""
    model_dir = Path(model_dir)
    if not (model_dir / "config.json").exists():
        raise FileNotFoundError(f"{model_dir} has no config.json: save the model there first "
                                "(e.g. model.save_pretrained(dir)).")
    ids = _ids_array(input_ids)
    with tempfile.TemporaryDirectory(prefix="course_logits_") as tmp:
        out = Path(tmp) / "logits.npy"
        return run_isolated(_logits, model_dir=str(model_dir), input_ids=ids.tolist(),
                            out=str(out), timeout=timeout, then=lambda _: np.load(out))


# --------------------------------------------------------------------------------------
# The clean-process side
# --------------------------------------------------------------------------------------
def _no_mindnlp() -> None:
    if "mindnlp" in sys.modules:      # never true in a fresh interpreter
        raise RuntimeError("The course side of interop must run in a process that has not "
                           "imported mindnlp (use export_course_model / course_logits).")


def _export(out_dir, ref_dir, input_ids, prompt_ids, max_new_tokens, pretrained, seed):
    _no_mindnlp()
    import course_lib as cl
    from mindspore import Tensor
    from .generation import generate
    from .families import llama_config_kwargs
    from .pretrained import save_pretrained
    from .tokenizer import load_tokenizer
    cl.setup(device="CPU", seed=seed, quiet=True)
    tok = load_tokenizer()
    if pretrained:
        from .zoo import load_or_train
        model, tok, zinfo = load_or_train("internlm-tiny", progress=False)
        name = zinfo.name
    else:
        from .internlm import InternLMForCausalLM, tiny
        model, name = InternLMForCausalLM(tiny()), f"internlm-tiny (random, seed {seed})"
    model.set_train(False)
    out_dir = Path(out_dir)
    save_pretrained(model, out_dir)
    logits = model(Tensor(np.asarray(input_ids, np.int32))).asnumpy()
    generated = None
    if prompt_ids:
        generated = generate(model, [prompt_ids], max_new_tokens, eos_id=tok.eos_id,
                             pad_id=tok.pad_id, do_sample=False)[0]
    info = dict(llama_config=llama_config_kwargs(model.config), generated=generated,
                eos_id=tok.eos_id, pad_id=tok.pad_id, model=name,
                parameters=int(model.config.num_parameters()))
    for where in (Path(ref_dir), out_dir):     # the caller's copy, and one beside the model
        atomic_write(where / REFERENCE_LOGITS, lambda tmp: np.save(tmp, logits))
        write_text_atomic(where / REFERENCE_JSON, json.dumps(info, indent=1))


def _logits(model_dir, input_ids, out):
    _no_mindnlp()
    import course_lib as cl
    from mindspore import Tensor
    from .pretrained import from_pretrained
    cl.setup(device="CPU", quiet=True)
    model = from_pretrained(model_dir, dtype="float32", verbose=False)
    model.set_train(False)
    np.save(out, model(Tensor(np.asarray(input_ids, np.int32))).asnumpy())
