"""The HuggingFace catalog: real transformers architectures built from tiny configs, offline.

Role: one registry of real library models for tests (tests/models/hf/test_hf_models.py), the triage tool
(tools/hf_triage.py) and the benchmark (benchmarks/models.py). Each `Arch` names a transformers config
class and model class, the tiny config's keyword arguments (vocab 100, hidden 32, 1 layer, or 2 where a
second layer is what is covered: NOTE [HF catalog layers]; 2 heads, 32x32 images, 16-bin log-mel features,
short raw audio), and an input maker from inputs.py.

Usage:
    from tests.models.hf import catalog
    arch = catalog.get("llama")
    model = arch.build()                      # eval mode, random weights fixed by WEIGHT_SEED
    out = model(**arch.make_inputs(seed=0))   # keyword inputs as users pass them
    with torch.no_grad(): ...                 # the catalog is for inference (training is elsewhere)

Invariants: nothing touches the network (the environment is set offline on import); `build()` returns a
fresh model each call and leaves torch's global RNG as it was; every forward takes well under 20 ms on
one CPU core. Names are stable: the test ids and the KNOWN_GAPS table of the tests use them.
Main types: `Arch`.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Callable

import torch

from tests.models.hf import inputs

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

# NOTE [HF catalog weight seed]
# Every model's weights come from this one seed inside a forked RNG, so an architecture is a pure
# function of its name: a failure reproduces with `catalog.get(name).build()` in any process.
WEIGHT_SEED = 1234

BATCH, SEQ = 2, 8  # the default input size; tests also call with (1, SEQ_ALT) where marked `resize`
SEQ_ALT = 12

_TEXT = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
             max_position_embeddings=64)
_DECODER = dict(_TEXT, num_key_value_heads=1, pad_token_id=0, bos_token_id=1, eos_token_id=2)
_SEQ2SEQ = dict(vocab_size=100, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64,
                pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=0)
_VIT = dict(image_size=32, patch_size=8, num_channels=3, hidden_size=32, num_hidden_layers=2,
            num_attention_heads=2, intermediate_size=64)
_AUDIO = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
              conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
              num_conv_pos_embedding_groups=2, vocab_size=100)


@dataclasses.dataclass(frozen=True)
class Arch:
    """One architecture: `build()` gives the eval-mode model, `make_inputs(seed, batch, seq)` its kwargs.

    `family` is one of encoder, decoder, seq2seq, vision, audio, moe. `resize` marks the few architectures
    whose tests also make a call at another batch and sequence size (a recompile costs seconds, so only
    a handful pay for it; image and Whisper inputs have a fixed size anyway).
    `submodule` names a method returning the part of the model to use (e.g. "get_encoder").
    """
    name: str
    family: str
    config: str
    model: str
    config_kwargs: dict
    input_maker: Callable[[int, int, int], dict]
    resize: bool = False
    submodule: str | None = None

    def build(self) -> torch.nn.Module:
        import transformers
        config = getattr(transformers, self.config)(**self.config_kwargs)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(WEIGHT_SEED)
            model = getattr(transformers, self.model)(config)
        if self.submodule:
            model = getattr(model, self.submodule)()
        return model.eval()

    def make_inputs(self, seed: int, batch: int = BATCH, seq: int = SEQ) -> dict:
        return self.input_maker(seed, batch, seq)


# NOTE [HF catalog layers]
# The shared tiny configs (_TEXT, _DECODER, _SEQ2SEQ, _VIT, _AUDIO, and the architectures' own) say 2 layers
# (encoder and decoder layers for seq2seq). Each layer costs both compilers a trace of the same code, so most
# architectures are built with 1 (issue 15: CI time; about a third of each test). TWO_LAYERS keeps 2 where
# the second layer is itself covered:
# - the same code traced twice in one graph, one representative per family (bert, gpt2, t5, vit, mixtral),
#   and the models of the generate() and dynamic-shape tests (gpt2, llama, qwen2, m2m_100: a KV cache
#   per layer, self- and cross-attention caches for m2m_100);
# - albert: one layer module shared by every layer, called twice in one forward;
# - gpt_neo and gemma2: a global and a local/sliding layer alternate (GPTNeoConfig requires one attention
#   type per layer);
# - t5 and wavlm: only layer 0 owns the relative position bias, the later layers take the one it computed;
# - llama: test_compare_rejects_differences changes cache.layers[1].
TWO_LAYERS = frozenset({"bert", "albert", "gpt2", "gpt_neo", "llama", "qwen2", "gemma2", "t5", "m2m_100", "vit",
                        "wavlm", "mixtral"})
_LAYER_KEYS = frozenset({"num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers",
                         "decoder_layers"})


def _a(name, family, config, model, kwargs, maker=inputs.text, **extra) -> Arch:
    if name not in TWO_LAYERS:  # NOTE [HF catalog layers]
        kwargs = {k: 1 if k in _LAYER_KEYS and v == 2 else v for k, v in kwargs.items()}
    return Arch(name, family, config, model, kwargs, maker, **extra)


_ENCODERS = [
    _a("bert", "encoder", "BertConfig", "BertModel", _TEXT, inputs.text_with_types, resize=True),
    _a("distilbert", "encoder", "DistilBertConfig", "DistilBertModel",
       dict(vocab_size=100, dim=32, n_layers=2, n_heads=2, hidden_dim=64, max_position_embeddings=64)),
    _a("roberta", "encoder", "RobertaConfig", "RobertaModel", _TEXT),
    _a("xlm_roberta", "encoder", "XLMRobertaConfig", "XLMRobertaModel", _TEXT),
    _a("camembert", "encoder", "CamembertConfig", "CamembertModel", _TEXT),
    _a("albert", "encoder", "AlbertConfig", "AlbertModel", dict(_TEXT, embedding_size=16), inputs.text_with_types),
    _a("electra", "encoder", "ElectraConfig", "ElectraModel", dict(_TEXT, embedding_size=16),
       inputs.text_with_types),
    _a("deberta_v2", "encoder", "DebertaV2Config", "DebertaV2Model",
       dict(_TEXT, relative_attention=True, pos_att_type=["p2c", "c2p"], position_buckets=8)),
    _a("longformer", "encoder", "LongformerConfig", "LongformerModel", dict(_TEXT, attention_window=4)),
    _a("big_bird", "encoder", "BigBirdConfig", "BigBirdModel",
       dict(_TEXT, block_size=2, num_random_blocks=1)),
    _a("mpnet", "encoder", "MPNetConfig", "MPNetModel", _TEXT),
    _a("ernie", "encoder", "ErnieConfig", "ErnieModel", _TEXT, inputs.text_with_types),
]

_DECODERS = [
    _a("gpt2", "decoder", "GPT2Config", "GPT2LMHeadModel",
       dict(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64, bos_token_id=1, eos_token_id=2),
       resize=True),
    _a("gpt_neo", "decoder", "GPTNeoConfig", "GPTNeoForCausalLM",
       dict(vocab_size=100, hidden_size=32, num_layers=2, num_heads=2, intermediate_size=64,
            attention_types=[[["global", "local"], 1]], window_size=4, max_position_embeddings=64)),
    _a("gpt_neox", "decoder", "GPTNeoXConfig", "GPTNeoXForCausalLM", _TEXT),
    _a("gptj", "decoder", "GPTJConfig", "GPTJForCausalLM",
       dict(vocab_size=100, n_embd=32, n_layer=2, n_head=2, rotary_dim=8, n_positions=64)),
    _a("opt", "decoder", "OPTConfig", "OPTForCausalLM",
       dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=2,
            max_position_embeddings=64, word_embed_proj_dim=32, pad_token_id=1)),
    _a("bloom", "decoder", "BloomConfig", "BloomForCausalLM",
       dict(vocab_size=100, hidden_size=32, n_layer=2, n_head=2)),
    _a("llama", "decoder", "LlamaConfig", "LlamaForCausalLM", _DECODER, resize=True),
    _a("mistral", "decoder", "MistralConfig", "MistralForCausalLM", dict(_DECODER, sliding_window=4)),
    _a("qwen2", "decoder", "Qwen2Config", "Qwen2ForCausalLM", _DECODER),
    _a("qwen3", "decoder", "Qwen3Config", "Qwen3ForCausalLM", dict(_DECODER, head_dim=16)),
    _a("phi", "decoder", "PhiConfig", "PhiForCausalLM", dict(_TEXT, partial_rotary_factor=0.5)),
    _a("phi3", "decoder", "Phi3Config", "Phi3ForCausalLM", dict(_DECODER, pad_token_id=0)),
    _a("gemma", "decoder", "GemmaConfig", "GemmaForCausalLM", dict(_DECODER, head_dim=16)),
    _a("gemma2", "decoder", "Gemma2Config", "Gemma2ForCausalLM",
       dict(_DECODER, head_dim=16, sliding_window=4, query_pre_attn_scalar=16)),
    _a("falcon", "decoder", "FalconConfig", "FalconForCausalLM",
       dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=2)),
    _a("olmo", "decoder", "OlmoConfig", "OlmoForCausalLM", _DECODER),
    _a("olmo2", "decoder", "Olmo2Config", "Olmo2ForCausalLM", _DECODER),
    _a("stablelm", "decoder", "StableLmConfig", "StableLmForCausalLM", _DECODER),
    _a("starcoder2", "decoder", "Starcoder2Config", "Starcoder2ForCausalLM", _DECODER),
    _a("cohere", "decoder", "CohereConfig", "CohereForCausalLM", _DECODER),
    _a("granite", "decoder", "GraniteConfig", "GraniteForCausalLM", _DECODER),
    # `inputs_embeds *= np.sqrt(d_model)`: a NumPy ufunc of a Python int, folded to a NumPy scalar
    _a("ctrl", "decoder", "CTRLConfig", "CTRLLMHeadModel",
       dict(vocab_size=100, n_embd=32, n_layer=2, n_head=2, dff=64, n_positions=64)),
    # ACT2FN[...] inside forward: an OrderedDict subclass's `super().__getitem__` (its raw entry)
    _a("mamba2", "decoder", "Mamba2Config", "Mamba2ForCausalLM",
       dict(vocab_size=100, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4, n_groups=1,
            num_heads=4, head_dim=16, chunk_size=4)),
]

_SEQ2SEQ_MODELS = [
    _a("t5", "seq2seq", "T5Config", "T5ForConditionalGeneration",
       dict(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, decoder_start_token_id=0,
            relative_attention_num_buckets=8), inputs.seq2seq),
    _a("bart", "seq2seq", "BartConfig", "BartForConditionalGeneration", _SEQ2SEQ, inputs.seq2seq),
    _a("mbart", "seq2seq", "MBartConfig", "MBartForConditionalGeneration", _SEQ2SEQ, inputs.seq2seq),
    _a("pegasus", "seq2seq", "PegasusConfig", "PegasusForConditionalGeneration", _SEQ2SEQ, inputs.seq2seq),
    _a("marian", "seq2seq", "MarianConfig", "MarianMTModel", _SEQ2SEQ, inputs.seq2seq),
    _a("blenderbot_small", "seq2seq", "BlenderbotSmallConfig", "BlenderbotSmallForConditionalGeneration",
       _SEQ2SEQ, inputs.seq2seq),
]

_VISION = [
    _a("vit", "vision", "ViTConfig", "ViTModel", _VIT, inputs.pixels),
    _a("deit", "vision", "DeiTConfig", "DeiTModel", _VIT, inputs.pixels),
    _a("beit", "vision", "BeitConfig", "BeitModel", dict(_VIT, use_relative_position_bias=True),
       inputs.pixels),
    _a("dinov2", "vision", "Dinov2Config", "Dinov2Model", _VIT, inputs.pixels),
    _a("clip_vision", "vision", "CLIPVisionConfig", "CLIPVisionModel", _VIT, inputs.pixels),
    _a("siglip_vision", "vision", "SiglipVisionConfig", "SiglipVisionModel", _VIT, inputs.pixels),
    _a("swin", "vision", "SwinConfig", "SwinModel",
       dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=4),
       inputs.pixels),
    _a("convnext", "vision", "ConvNextConfig", "ConvNextModel",
       dict(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], image_size=32), inputs.pixels),
    _a("resnet", "vision", "ResNetConfig", "ResNetModel",
       dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="basic"), inputs.pixels),
    # a ResNet backbone (BackboneOutput(feature_maps=(...)): a tuple as the only field) and a transformer
    _a("detr", "vision", "DetrConfig", "DetrModel",
       dict(use_timm_backbone=False, use_pretrained_backbone=False, backbone=None,
            backbone_config=dict(model_type="resnet", embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                 layer_type="basic", out_features=["stage2"]),
            d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=4), inputs.pixels),
]

_AUDIO_MODELS = [
    _a("whisper_encoder", "audio", "WhisperConfig", "WhisperModel",
       dict(_SEQ2SEQ, num_mel_bins=16, max_source_positions=16, max_target_positions=32, pad_token_id=0,
            bos_token_id=1, eos_token_id=2, decoder_start_token_id=1),
       inputs.mel, submodule="get_encoder"),
    _a("whisper", "audio", "WhisperConfig", "WhisperForConditionalGeneration",
       dict(_SEQ2SEQ, num_mel_bins=16, max_source_positions=16, max_target_positions=32, pad_token_id=0,
            bos_token_id=1, eos_token_id=2, decoder_start_token_id=1),
       inputs.mel_seq2seq),
    _a("wav2vec2", "audio", "Wav2Vec2Config", "Wav2Vec2Model", _AUDIO, inputs.waveform),
    _a("hubert", "audio", "HubertConfig", "HubertModel", _AUDIO, inputs.waveform, resize=True),
    # the CTC head with labels: `with torch.backends.cudnn.flags(enabled=False):` around ctc_loss
    _a("wav2vec2_ctc", "audio", "Wav2Vec2Config", "Wav2Vec2ForCTC", _AUDIO, inputs.waveform_with_labels),
]

_MOE = [
    _a("mixtral", "moe", "MixtralConfig", "MixtralForCausalLM",
       dict(_DECODER, num_local_experts=4, num_experts_per_tok=2)),
    _a("qwen2_moe", "moe", "Qwen2MoeConfig", "Qwen2MoeForCausalLM",
       dict(_DECODER, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=32)),
    _a("qwen3_moe", "moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM",
       dict(_DECODER, head_dim=16, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)),
    # an expert loop over `nonzero()` rows, `torch.where(mask)` and `self[f"expert_{expert_idx[0]}"]` in it
    _a("switch_transformers", "moe", "SwitchTransformersConfig", "SwitchTransformersForConditionalGeneration",
       dict(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=1, num_decoder_layers=1, num_heads=2,
            num_experts=4, encoder_sparse_step=1, decoder_sparse_step=1, expert_capacity=8,
            relative_attention_num_buckets=8, decoder_start_token_id=0), inputs.seq2seq),
    # `expert_size.tolist()` then `split(expert_size)`: a list of ints that changes between calls
    _a("jetmoe", "moe", "JetMoeConfig", "JetMoeForCausalLM",
       dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_key_value_heads=2, kv_channels=16,
            intermediate_size=64, max_position_embeddings=64, num_local_experts=4, num_experts_per_tok=2)),
]

_MULTIMODAL_TEXT = [
    _a("clip_text", "encoder", "CLIPTextConfig", "CLIPTextModel",
       dict(_TEXT, max_position_embeddings=32, eos_token_id=2), inputs.text_with_eos),
]

# Found by breadth probing (tests/capture/test_breadth_probe.py): each passed on first try; kept for coverage.
_BREADTH = [
    _a("layoutlm", "encoder", "LayoutLMConfig", "LayoutLMModel", _TEXT, inputs.text_with_types),
    _a("squeezebert", "encoder", "SqueezeBertConfig", "SqueezeBertModel",
       dict(_TEXT, embedding_size=32, q_groups=2, k_groups=2, v_groups=2, post_attention_groups=2,
            intermediate_groups=2, output_groups=2), inputs.text_with_types),
    # character hashing, a strided local transformer and upsampling back to characters
    _a("canine", "encoder", "CanineConfig", "CanineModel",
       dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, num_hash_functions=2,
            num_hash_buckets=64, downsampling_rate=2, local_transformer_stride=4, max_position_embeddings=64)),
    _a("owlvit_text", "encoder", "OwlViTTextConfig", "OwlViTTextModel",
       dict(_TEXT, max_position_embeddings=16)),
    _a("gpt_bigcode", "decoder", "GPTBigCodeConfig", "GPTBigCodeForCausalLM",
       dict(vocab_size=100, n_embd=32, n_layer=2, n_head=2, n_positions=64)),
    _a("codegen", "decoder", "CodeGenConfig", "CodeGenForCausalLM",
       dict(vocab_size=100, n_embd=32, n_layer=2, n_head=2, rotary_dim=8, n_positions=64, n_ctx=64)),
    _a("persimmon", "decoder", "PersimmonConfig", "PersimmonForCausalLM", _TEXT),
    _a("mpt", "decoder", "MptConfig", "MptForCausalLM",
       dict(vocab_size=100, d_model=32, n_layers=2, n_heads=2, max_seq_len=64)),
    _a("regnet", "vision", "RegNetConfig", "RegNetModel",
       dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=4), inputs.pixels),
    _a("segformer", "vision", "SegformerConfig", "SegformerModel",
       dict(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16], num_attention_heads=[1, 2],
            patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2]), inputs.pixels),
    _a("wavlm", "audio", "WavLMConfig", "WavLMModel", dict(_AUDIO, num_buckets=16, max_bucket_distance=32),
       inputs.waveform),
    # found by the new-user probe of issue 11 (each passed first try; ~1-1.5 s CPU per test)
    _a("biogpt", "decoder", "BioGptConfig", "BioGptForCausalLM", _TEXT),
    _a("convnextv2", "vision", "ConvNextV2Config", "ConvNextV2Model",
       dict(num_stages=2, hidden_sizes=[8, 16], depths=[1, 1], image_size=32), inputs.pixels),
    # Fourier token mixing (torch.fft.fftn); FNet takes no attention mask
    _a("fnet", "encoder", "FNetConfig", "FNetModel",
       dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, intermediate_size=64, max_position_embeddings=64),
       inputs.ids_only),
    # found by the second new-user probe of issue 11 (stop 27): each matched eager and stock's graph count (roformer,
    # xglm, phimoe and 16 more passed too; left out for CI time)
    # pooling between blocks and an upsampling decoder
    _a("funnel", "encoder", "FunnelConfig", "FunnelModel",
       dict(vocab_size=100, d_model=32, n_head=2, d_head=16, d_inner=64, block_sizes=[1, 1], num_decoder_layers=1),
       inputs.text_with_types),
    _a("esm", "encoder", "EsmConfig", "EsmModel", dict(_TEXT, pad_token_id=1, position_embedding_type="rotary")),
    _a("gemma3_text", "decoder", "Gemma3TextConfig", "Gemma3ForCausalLM",
       dict(_DECODER, head_dim=16, sliding_window=4)),
    _a("olmoe", "moe", "OlmoeConfig", "OlmoeForCausalLM", dict(_DECODER, num_experts=4, num_experts_per_tok=2)),
    _a("m2m_100", "seq2seq", "M2M100Config", "M2M100ForConditionalGeneration", _SEQ2SEQ, inputs.seq2seq),
    # a spectrogram cut into patches (ViT over log-mel frames)
    _a("ast", "audio", "ASTConfig", "ASTModel",
       dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, patch_size=8,
            max_length=32, num_mel_bins=16, frequency_stride=8, time_stride=8), inputs.spectrogram),
    _a("poolformer", "vision", "PoolFormerConfig", "PoolFormerModel",
       dict(hidden_sizes=[8, 16, 24, 32], depths=[1, 1, 1, 1]), inputs.pixels),
]

ARCHS: dict[str, Arch] = {a.name: a for a in
                          _ENCODERS + _DECODERS + _SEQ2SEQ_MODELS + _VISION + _AUDIO_MODELS + _MOE + _MULTIMODAL_TEXT
                          + _BREADTH}

# Decoders (and one encoder-decoder) whose greedy generate() the tests and triage also run.
GENERATE = ("gpt2", "llama", "qwen2", "m2m_100")
GENERATE_TOKENS = 5


def names(family: str | None = None) -> list[str]:
    """Architecture names in a stable order, optionally only one family."""
    return [n for n, a in ARCHS.items() if family is None or a.family == family]


def get(name: str) -> Arch:
    if name not in ARCHS:
        raise ValueError(f"unknown architecture {name!r}; known: {', '.join(ARCHS)}")
    return ARCHS[name]


def generate_kwargs(seed: int) -> dict:
    """Greedy generate() of exactly GENERATE_TOKENS new tokens after a 6-token prompt (one row, no
    padding: left padding is a separate concern)."""
    return dict(inputs.text(seed, 1, 6), max_new_tokens=GENERATE_TOKENS, min_new_tokens=GENERATE_TOKENS,
                do_sample=False)


__all__ = ["ARCHS", "Arch", "BATCH", "GENERATE", "GENERATE_TOKENS", "SEQ", "SEQ_ALT", "TWO_LAYERS", "WEIGHT_SEED",
           "get", "generate_kwargs", "names"]
