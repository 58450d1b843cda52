"""GGUF files written as llama.cpp's converter (convert_hf_to_gguf.py) writes them, from random-weight `transformers`
models, with `gguf.GGUFWriter`: gguf's own tensor names (TensorNameMap), GPT-2's Conv1D weights transposed, Llama's q/k
rows permuted per head, 1-D tensors, norms and position embeddings in F32 and the others in the file's type (F16
where a type's blocks do not fit a row), and the tokenizer metadata as the converter fills it. The references of
tests/test_slm_gguf.py and the playground's GGUF test."""

from __future__ import annotations

import io
import json

import gguf
import numpy as np
import sentencepiece as spm
import torch
from gguf import GGMLQuantizationType as Q
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GPTNeoXConfig,
    GPTNeoXForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
)

from .torch_reference import spread
from .trained_tokenizers import training_text

VOCAB = 400
FILE_TYPES = {Q.F32: gguf.LlamaFileType.ALL_F32, Q.F16: gguf.LlamaFileType.MOSTLY_F16,
              Q.BF16: gguf.LlamaFileType.MOSTLY_BF16, Q.Q8_0: gguf.LlamaFileType.MOSTLY_Q8_0,
              Q.Q4_0: gguf.LlamaFileType.MOSTLY_Q4_0, Q.Q4_1: gguf.LlamaFileType.MOSTLY_Q4_1,
              Q.Q5_0: gguf.LlamaFileType.MOSTLY_Q5_0, Q.Q5_1: gguf.LlamaFileType.MOSTLY_Q5_1}


def sentencepiece_model(vocab_size: int = VOCAB) -> spm.SentencePieceProcessor:
    """A SentencePiece BPE as Llama's tokenizer.model is made: byte fallback, digits split, no normalization."""
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(training_text()), model_writer=out, model_type="bpe", vocab_size=vocab_size,
        byte_fallback=True, split_digits=True, character_coverage=0.98, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
        minloglevel=2)
    return spm.SentencePieceProcessor(model_proto=out.getvalue())


def make_gpt2(seed: int = 0, **changes) -> GPT2LMHeadModel:
    spec = dict(n_embd=64, n_layer=2, n_head=4, n_positions=48) | changes
    return spread(GPT2LMHeadModel(GPT2Config(vocab_size=VOCAB, bos_token_id=0, eos_token_id=0, **spec)), seed)


def make_llama(seed: int = 0, **changes) -> LlamaForCausalLM:
    spec = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=64, rope_theta=5000.0, rms_norm_eps=1e-5,
                tie_word_embeddings=False) | changes
    return spread(LlamaForCausalLM(LlamaConfig(vocab_size=VOCAB, bos_token_id=1, eos_token_id=2, **spec)), seed)


def make_neox(seed: int = 0, **changes) -> GPTNeoXForCausalLM:
    spec = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=48, rotary_pct=0.25, use_parallel_residual=True) | changes
    return spread(GPTNeoXForCausalLM(GPTNeoXConfig(vocab_size=VOCAB, bos_token_id=0, eos_token_id=0, **spec)), seed)


# ---- writing GGUF as llama.cpp's converter does ----

ARCHS = {GPT2LMHeadModel: gguf.MODEL_ARCH.GPT2, LlamaForCausalLM: gguf.MODEL_ARCH.LLAMA,
         GPTNeoXForCausalLM: gguf.MODEL_ARCH.GPTNEOX}


def arch_of(model: torch.nn.Module) -> gguf.MODEL_ARCH:
    return ARCHS[type(model)]


def regroup_qkv(w: np.ndarray, n_head: int, back: bool = False) -> np.ndarray:
    """The converter's GPT-NeoX query_key_value: per head [q, k, v] rows become [all q; all k; all v] (back=True
    undoes it)."""
    k = w.shape[0] // n_head // 3
    if back:
        return w.reshape(3, n_head, k, *w.shape[1:]).swapaxes(0, 1).reshape(w.shape)
    return w.reshape(n_head, 3, k, *w.shape[1:]).swapaxes(0, 1).reshape(w.shape)

def permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """The converter's Llama q/k reordering: per head, the rows (half 0, half 1) become interleaved pairs."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_tensors(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """What save_pretrained writes: every parameter, without a tied head."""
    state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    return state


def gguf_tensors(model: torch.nn.Module) -> dict[str, np.ndarray]:
    """The converter's modify_tensors: GGUF names and layouts, in float32."""
    arch = arch_of(model)
    names = gguf.get_tensor_name_map(arch, model.config.num_hidden_layers)
    out = {}
    for key, w in hf_tensors(model).items():
        if arch == gguf.MODEL_ARCH.GPT2 and key.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
            w = w.T.copy()
        if key.endswith(("query_key_value.weight", "query_key_value.bias")):
            w = regroup_qkv(w, model.config.num_attention_heads)
        if key.endswith("q_proj.weight"):
            w = permute(w, model.config.num_attention_heads)
        if key.endswith("k_proj.weight"):
            w = permute(w, model.config.num_key_value_heads)
        out[names.get_name(key, try_suffixes=(".weight", ".bias"))] = w
    return out


def quantized(name: str, w: np.ndarray, want: Q) -> tuple[Q, np.ndarray]:
    """The converter's prepare_tensors choice: 1-D tensors, norms and position embeddings in F32, the others in the
    file's type, F16 where the type's blocks do not fit a row."""
    qtype = Q.F32 if w.ndim <= 1 or name.endswith("_norm.weight") or name == "position_embd.weight" else want
    try:
        return qtype, gguf.quants.quantize(w, qtype)
    except gguf.QuantError:
        return Q.F16, gguf.quants.quantize(w, Q.F16)


def write_gguf(path, model: torch.nn.Module, tokenizer_meta, qtype: Q = Q.F32,
               replace: dict[str, tuple[Q, np.ndarray]] | None = None, arch_name: str | None = None) -> dict:
    """The model's GGUF file; returns {tensor name: (type, the float32 weights the file holds)}."""
    c = model.config
    arch = gguf.MODEL_ARCH_NAMES[arch_of(model)]
    writer = gguf.GGUFWriter(path, arch_name or arch)
    writer.add_name(f"tiny-{arch}")
    writer.add_block_count(c.num_hidden_layers)
    if arch == "gpt2":
        writer.add_context_length(c.n_positions)
        writer.add_embedding_length(c.n_embd)
        writer.add_feed_forward_length(4 * c.n_embd)
        writer.add_head_count(c.n_head)
        writer.add_layer_norm_eps(c.layer_norm_epsilon)
    elif arch == "gptneox":  # GPTNeoXModel.set_gguf_parameters: no rope.freq_base (llama.cpp's 10000 applies)
        writer.add_context_length(c.max_position_embeddings)
        writer.add_embedding_length(c.hidden_size)
        writer.add_feed_forward_length(c.intermediate_size)
        rotary_pct = c.rope_parameters["partial_rotary_factor"]  # config.json's rotary_pct, in transformers 5
        writer.add_rope_dimension_count(int(rotary_pct * (c.hidden_size // c.num_attention_heads)))
        writer.add_head_count(c.num_attention_heads)
        writer.add_parallel_residual(c.use_parallel_residual)
        writer.add_layer_norm_eps(c.layer_norm_eps)
    else:
        writer.add_context_length(c.max_position_embeddings)
        writer.add_embedding_length(c.hidden_size)
        writer.add_feed_forward_length(c.intermediate_size)
        writer.add_head_count(c.num_attention_heads)
        writer.add_head_count_kv(c.num_key_value_heads)
        writer.add_rope_freq_base(c.rope_parameters["rope_theta"] if getattr(c, "rope_parameters", None)
                                  else c.rope_theta)
        writer.add_layer_norm_rms_eps(c.rms_norm_eps)
        writer.add_vocab_size(c.vocab_size)
        writer.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    writer.add_file_type(FILE_TYPES[qtype])
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    tokenizer_meta(writer)
    held = {}
    for name, w in gguf_tensors(model).items():
        kind, raw = (replace or {}).get(name) or quantized(name, w, qtype)
        writer.add_tensor(name, raw, raw_dtype=kind)
        held[name] = (kind, gguf.quants.dequantize(raw, kind).reshape(w.shape).astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return held


def gpt2_vocab(tokenizer, folder, pre: str = "gpt-2", bos: str = "<|endoftext|>", eos: str = "<|endoftext|>"):
    """_set_vocab_gpt2: tokens by id, NORMAL or CONTROL (special added tokens), the merges and special ids as
    gguf.SpecialVocab reads them from tokenizer.json and tokenizer_config.json."""
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({"bos_token": bos, "eos_token": eos}))
    reverse = {i: t for t, i in tokenizer.get_vocab().items()}
    special = {t.content for t in tokenizer.get_added_tokens_decoder().values() if t.special}

    def meta(writer):
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(pre)
        writer.add_token_list([reverse.get(i, f"[PAD{i}]") for i in range(VOCAB)])
        writer.add_token_types([gguf.TokenType.UNUSED if i not in reverse else gguf.TokenType.CONTROL
                                if reverse[i] in special else gguf.TokenType.NORMAL for i in range(VOCAB)])
        gguf.SpecialVocab(folder, load_merges=True).add_to_gguf(writer)
    return meta


def llama_hf_vocab(tokenizer, folder):
    """_set_vocab_llama_hf, for a Llama with tokenizer.json but no tokenizer.model: gguf.LlamaHfVocab's pieces (every
    score -1000), types and special ids."""
    tokenizer.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))
    vocab = gguf.LlamaHfVocab(folder)
    texts, scores, types = zip(*vocab.all_tokens(), strict=True)

    def meta(writer):
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(list(texts))
        writer.add_token_scores(list(scores))
        writer.add_token_types(list(types))
        gguf.SpecialVocab(folder, n_vocab=len(texts)).add_to_gguf(writer)
    return meta


def sentencepiece_vocab(sp: spm.SentencePieceProcessor):
    """_set_vocab_sentencepiece: each piece's text, score and type from the SentencePiece model."""
    def kind(i: int) -> int:
        if sp.is_unknown(i):
            return gguf.TokenType.UNKNOWN
        if sp.is_control(i):
            return gguf.TokenType.CONTROL
        if sp.is_unused(i):
            return gguf.TokenType.UNUSED
        return gguf.TokenType.BYTE if sp.is_byte(i) else gguf.TokenType.NORMAL

    def meta(writer):
        writer.add_tokenizer_model("llama")
        writer.add_tokenizer_pre("default")
        writer.add_token_list([sp.id_to_piece(i).encode("utf-8") for i in range(sp.vocab_size())])
        writer.add_token_scores([sp.get_score(i) for i in range(sp.vocab_size())])
        writer.add_token_types([kind(i) for i in range(sp.vocab_size())])
        writer.add_bos_token_id(sp.bos_id())
        writer.add_eos_token_id(sp.eos_id())
        writer.add_unk_token_id(sp.unk_id())
    return meta


def with_weights(model: torch.nn.Module, held: dict) -> torch.nn.Module:
    """The transformers model with the weights the file holds (the converter's layouts undone)."""
    arch = arch_of(model)
    names = gguf.get_tensor_name_map(arch, model.config.num_hidden_layers)
    state = {}
    for key in hf_tensors(model):
        v = held[names.get_name(key, try_suffixes=(".weight", ".bias"))][1]
        if key.endswith(("query_key_value.weight", "query_key_value.bias")):
            v = regroup_qkv(v, model.config.num_attention_heads, back=True)
        if key.endswith(("q_proj.weight", "k_proj.weight")):  # undo the permutation: rows back to halves
            n = model.config.num_attention_heads if "q_proj" in key else model.config.num_key_value_heads
            v = v.reshape(n, v.shape[0] // n // 2, 2, -1).swapaxes(1, 2).reshape(v.shape)
        conv1d = arch == gguf.MODEL_ARCH.GPT2 and key.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight"))
        state[key] = torch.tensor(v.T.copy() if conv1d else v)
    copy = type(model)(model.config).eval()
    copy.load_state_dict(state, strict=False)
    if model.config.tie_word_embeddings:
        copy.tie_weights()
    return copy


def logits(model: torch.nn.Module, ids) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor(np.asarray(ids))[None]).logits[0].numpy()


def prompt_ids(n_ctx: int) -> list[np.ndarray]:
    rng = np.random.default_rng(0)
    return [np.array([5, 17, 200, 31, 99, 3, 250]), rng.integers(0, VOCAB, n_ctx)]
