"""Reference solutions for chapter 11 (mindnlp / Hugging Face interop).

``lora_sgd_step`` and its wrong variants run only in a process that imported mindnlp
(notebook 11's kernel, or the fresh subprocess the checker starts); they import
``torch``/``mindtorch`` inside the function so importing this module never does.
"""
from __future__ import annotations


def lora_sgd_step(loss_fn, params, batch, lr: float) -> float:
    """One training step of the LoRA parameters on mindnlp 0.5.1 + CPU, where
    ``loss.backward()`` leaves every ``.grad`` at None and ``optimizer.step()`` has no CPU
    kernel: gradients from ``mindtorch.autograd.value_and_grad`` (it ADDS to ``.grad``, so clear
    it first), then a hand-written SGD update under ``torch.no_grad()``. Returns the loss."""
    import mindtorch
    import torch
    for p in params:
        p.grad = None
    loss = mindtorch.autograd.value_and_grad(loss_fn, params)(batch)
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
    return float(loss)


def llama_kwargs(config) -> dict:
    """``transformers.LlamaConfig`` arguments for a course InternLM config (``internlm.tiny()``
    and friends): Llama's names for the same sizes, biases on q/k/v/o (InternLM-1), no GQA,
    untied embeddings, SiLU."""
    return dict(vocab_size=config.vocab_size, hidden_size=config.hidden_size,
                intermediate_size=config.intermediate_size, num_hidden_layers=config.num_layers,
                num_attention_heads=config.num_heads, num_key_value_heads=config.num_heads,
                max_position_embeddings=config.max_seq_len, rms_norm_eps=config.rms_norm_eps,
                rope_theta=config.rope_base, attention_bias=True, mlp_bias=False,
                tie_word_embeddings=False, hidden_act="silu")


# ---- realistic wrong solutions ----------------------------------------------------------
def wrong_backward(loss_fn, params, batch, lr):
    """The PyTorch textbook step: loss.backward(), then p -= lr * p.grad."""
    import torch
    loss = loss_fn(batch)
    loss.backward()
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
    return float(loss)


def wrong_accumulate(loss_fn, params, batch, lr):
    """Never clears .grad: value_and_grad adds this step's gradient to the previous ones."""
    import mindtorch
    import torch
    loss = mindtorch.autograd.value_and_grad(loss_fn, params)(batch)
    with torch.no_grad():
        for p in params:
            p -= lr * p.grad
    return float(loss)


def wrong_course_names(config):
    """Passes the course's field names; LlamaConfig silently keeps unknown keyword arguments."""
    d = llama_kwargs(config)
    d["num_layers"], d["num_heads"] = d.pop("num_hidden_layers"), d.pop("num_attention_heads")
    return d


def wrong_no_bias(config):
    """Leaves attention_bias at Llama's default (False): InternLM-1's q/k/v/o biases are lost."""
    d = llama_kwargs(config)
    del d["attention_bias"]
    return d


def wrong_tied(config):
    """Ties the LM head to the embedding (the course models keep them separate)."""
    return {**llama_kwargs(config), "tie_word_embeddings": True}
