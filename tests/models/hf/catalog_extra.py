"""More transformers architectures for probing (issue 11): families the main catalog does not hold.

Role: `EXTRA` maps a name to a `catalog.Arch` built from a tiny config, like catalog.ARCHS, but these are
not run by tests/models/hf/test_hf_models.py (CI time): tools/hf_triage.py runs them with `--extra`, and
tests/models/hf/test_hf_families2.py picks a few. Each builds on CPU with random weights, offline, and
runs eagerly in well under a second; a name here is stable (the triage rows and test ids use it).
"""
from __future__ import annotations

import torch

from tests.models.hf import inputs
from tests.models.hf.catalog import _AUDIO, _DECODER, _SEQ2SEQ, _TEXT, _VIT, Arch


def _a(name, family, config, model, kwargs, maker=inputs.text, **extra) -> Arch:
    return Arch(name, family, config, model, kwargs, maker, **extra)




def _frames_seq2seq(seed: int, batch: int, seq: int) -> dict:
    """Speech2Text: filterbank frames as (batch, frames, features), 4 * seq frames, and decoder ids."""
    kwargs = inputs.mel_seq2seq(seed, batch, seq)
    kwargs["input_features"] = inputs.mel(seed, batch, seq, bins=4 * seq, frames=16)["input_features"]
    return kwargs


def _long_waveform_seq2seq(seed: int, batch: int, seq: int) -> dict:
    """Moonshine: raw audio (seq * 400 samples; its first conv strides by 64) and decoder ids."""
    kwargs = inputs.seq2seq(seed, batch, seq)
    return {"input_values": inputs.waveform(seed, batch, seq * 10)["input_values"],
            "decoder_input_ids": kwargs["decoder_input_ids"]}


def _spectrogram_frames(seed: int, batch: int, seq: int) -> dict:
    """UnivNet: log-mel frames as (batch, frames, bins), 2 * seq frames, and its noise (else drawn from the global
    generator, which the catalog's eager and compiled runs do not share)."""
    gen = torch.Generator().manual_seed(seed)
    return {"input_features": torch.randn(batch, 2 * seq, 16, generator=gen),
            "noise_sequence": torch.randn(batch, 2 * seq, 8, generator=gen)}


def _text_boxes_pixels(seed: int, batch: int, seq: int) -> dict:
    """LayoutLMv3: ids, one (x0, y0, x1, y1) box per token in 0..1000, and a 32x32 image."""
    kwargs = inputs.text(seed, batch, seq)
    gen = torch.Generator().manual_seed(seed)
    corner = torch.randint(0, 500, (batch, seq, 2), generator=gen)
    kwargs["bbox"] = torch.cat([corner, corner + torch.randint(1, 400, (batch, seq, 2), generator=gen)], -1)
    kwargs["pixel_values"] = torch.randn(batch, 3, 32, 32, generator=gen)
    return kwargs


def _pixels_64(seed: int, batch: int, seq: int) -> dict:
    """64x64 images: RT-DETR's three feature levels (strides 8, 16, 32)."""
    return inputs.pixels(seed, batch, seq, size=64)


_DETR = dict(use_timm_backbone=False, use_pretrained_backbone=False, backbone=None,
             backbone_config=dict(model_type="resnet", embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                  layer_type="basic", out_features=["stage2"]),
             d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
             encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=4)


_EXTRA = [
    # encoders
    _a("roformer", "encoder", "RoFormerConfig", "RoFormerModel", dict(_TEXT, embedding_size=32),
       inputs.text_with_types),
    _a("ibert", "encoder", "IBertConfig", "IBertModel", dict(_TEXT, pad_token_id=1)),
    _a("megatron_bert", "encoder", "MegatronBertConfig", "MegatronBertModel", _TEXT, inputs.text_with_types),
    _a("data2vec_text", "encoder", "Data2VecTextConfig", "Data2VecTextModel", dict(_TEXT, pad_token_id=1)),
    _a("rembert", "encoder", "RemBertConfig", "RemBertModel",
       dict(_TEXT, input_embedding_size=16, output_embedding_size=16), inputs.text_with_types),
    _a("convbert", "encoder", "ConvBertConfig", "ConvBertModel", dict(_TEXT, embedding_size=32, head_ratio=2,
                                                                       conv_kernel_size=3), inputs.text_with_types),
    _a("bert_generation", "encoder", "BertGenerationConfig", "BertGenerationEncoder", _TEXT),
    _a("xlnet", "encoder", "XLNetConfig", "XLNetModel",
       dict(vocab_size=100, d_model=32, n_layer=2, n_head=2, d_inner=64)),
    _a("flaubert", "encoder", "FlaubertConfig", "FlaubertModel",
       dict(vocab_size=100, emb_dim=32, n_layers=2, n_heads=2, max_position_embeddings=64)),
    _a("xlm", "encoder", "XLMConfig", "XLMModel",
       dict(vocab_size=100, emb_dim=32, n_layers=2, n_heads=2, max_position_embeddings=64)),
    _a("luke", "encoder", "LukeConfig", "LukeModel", dict(_TEXT, entity_vocab_size=10, entity_emb_size=16)),
    _a("yoso", "encoder", "YosoConfig", "YosoModel", dict(_TEXT, use_expectation=True, max_position_embeddings=66)),
    # decoders
    _a("xglm", "decoder", "XGLMConfig", "XGLMForCausalLM",
       dict(vocab_size=100, d_model=32, num_layers=2, attention_heads=2, ffn_dim=64, max_position_embeddings=64)),
    _a("rwkv", "decoder", "RwkvConfig", "RwkvForCausalLM",
       dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, attention_hidden_size=32, intermediate_size=64,
            context_length=64), inputs.ids_only),
    _a("mamba", "decoder", "MambaConfig", "MambaForCausalLM",
       dict(vocab_size=100, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4),
       inputs.ids_only),
    _a("falcon_mamba", "decoder", "FalconMambaConfig", "FalconMambaForCausalLM",
       dict(vocab_size=100, hidden_size=32, state_size=8, num_hidden_layers=2, expand=2, conv_kernel=4),
       inputs.ids_only),
    # Mamba layers whose compile path calls torch's associative_scan over the sequence (a symbolic length after
    # a resized call: tests/capture/test_scan_lengths.py), an attention layer and a mixture of experts. Its op
    # share is below harness.OP_SHARE (295/373) only because stock's graph holds vmap's bookkeeping calls
    # (_add_batch_dim, _vmap_increment_nesting, ...) of the generic scan; the tensor work is the same
    _a("jamba", "moe", "JambaConfig", "JambaForCausalLM",
       dict(_DECODER, num_experts=4, num_experts_per_tok=2, mamba_d_state=8, mamba_expand=2, attn_layer_period=2,
            attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1), resize=True),
    _a("recurrent_gemma", "decoder", "RecurrentGemmaConfig", "RecurrentGemmaForCausalLM",
       dict(vocab_size=100, hidden_size=32, num_hidden_layers=3, num_attention_heads=2, num_key_value_heads=1,
            intermediate_size=64, lru_width=32, attention_window_size=8, head_dim=16, pad_token_id=0)),
    _a("nemotron", "decoder", "NemotronConfig", "NemotronForCausalLM", dict(_DECODER, head_dim=16)),
    _a("glm", "decoder", "GlmConfig", "GlmForCausalLM", dict(_DECODER, head_dim=16)),
    _a("glm4", "decoder", "Glm4Config", "Glm4ForCausalLM", dict(_DECODER, head_dim=16)),
    _a("helium", "decoder", "HeliumConfig", "HeliumForCausalLM", dict(_DECODER, head_dim=16)),
    _a("cohere2", "decoder", "Cohere2Config", "Cohere2ForCausalLM", dict(_DECODER, sliding_window=4)),
    _a("dbrx", "moe", "DbrxConfig", "DbrxForCausalLM",  # fused experts, clipped qkv (hsweep11)
       dict(d_model=32, n_heads=2, n_layers=2, max_seq_len=64, vocab_size=100,
            attn_config=dict(kv_n_heads=2, rope_theta=10000.0, clip_qkv=8.0),
            ffn_config=dict(ffn_hidden_size=32, moe_num_experts=4, moe_top_k=2))),
    _a("granitemoe", "moe", "GraniteMoeConfig", "GraniteMoeForCausalLM",
       dict(_DECODER, num_local_experts=4, num_experts_per_tok=2)),
    _a("deepseek_v3", "moe", "DeepseekV3Config", "DeepseekV3ForCausalLM",
       dict(_DECODER, moe_intermediate_size=32, n_routed_experts=4, num_experts_per_tok=2, n_group=1, topk_group=1,
            first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=16, qk_rope_head_dim=8, qk_nope_head_dim=8,
            v_head_dim=16, num_key_value_heads=2)),
    _a("arcee", "decoder", "ArceeConfig", "ArceeForCausalLM", _DECODER),
    _a("smollm3", "decoder", "SmolLM3Config", "SmolLM3ForCausalLM", _DECODER),
    _a("exaone4", "decoder", "Exaone4Config", "Exaone4ForCausalLM", dict(_DECODER, sliding_window=4)),
    _a("olmo3", "decoder", "Olmo3Config", "Olmo3ForCausalLM", dict(_DECODER, sliding_window=4)),
    _a("seed_oss", "decoder", "SeedOssConfig", "SeedOssForCausalLM", dict(_DECODER, head_dim=16)),
    _a("apertus", "decoder", "ApertusConfig", "ApertusForCausalLM", _DECODER),
    _a("ernie4_5", "decoder", "Ernie4_5Config", "Ernie4_5ForCausalLM", dict(_DECODER, head_dim=16)),
    _a("bitnet", "decoder", "BitNetConfig", "BitNetForCausalLM", _DECODER),
    _a("doge", "decoder", "DogeConfig", "DogeForCausalLM", dict(_DECODER, keep_window_size=8)),
    _a("lfm2", "decoder", "Lfm2Config", "Lfm2ForCausalLM",
       dict(_DECODER, layer_types=["conv", "full_attention"], block_ff_dim=64, conv_L_cache=3)),
    _a("gpt_oss", "moe", "GptOssConfig", "GptOssForCausalLM",
       dict(_DECODER, head_dim=16, num_local_experts=4, num_experts_per_tok=2, sliding_window=4,
            layer_types=["sliding_attention", "full_attention"])),
    _a("git", "decoder", "GitConfig", "GitForCausalLM",
       dict(_TEXT, vision_config=dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                      intermediate_size=64, image_size=32, patch_size=8))),
    # encoder-decoders
    _a("led", "seq2seq", "LEDConfig", "LEDForConditionalGeneration",
       dict(_SEQ2SEQ, attention_window=4, max_encoder_position_embeddings=64, max_decoder_position_embeddings=64),
       inputs.seq2seq),
    _a("blenderbot", "seq2seq", "BlenderbotConfig", "BlenderbotForConditionalGeneration", _SEQ2SEQ,
       inputs.seq2seq),
    _a("plbart", "seq2seq", "PLBartConfig", "PLBartForConditionalGeneration", _SEQ2SEQ, inputs.seq2seq),
    _a("mvp", "seq2seq", "MvpConfig", "MvpForConditionalGeneration", _SEQ2SEQ, inputs.seq2seq),
    _a("mt5", "seq2seq", "MT5Config", "MT5ForConditionalGeneration",
       dict(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, decoder_start_token_id=0,
            relative_attention_num_buckets=8), inputs.seq2seq),
    _a("umt5", "seq2seq", "UMT5Config", "UMT5ForConditionalGeneration",
       dict(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, decoder_start_token_id=0,
            relative_attention_num_buckets=8), inputs.seq2seq),
    _a("longt5", "seq2seq", "LongT5Config", "LongT5ForConditionalGeneration",
       dict(vocab_size=100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2, decoder_start_token_id=0,
            relative_attention_num_buckets=8, local_radius=4), inputs.seq2seq),
    _a("prophetnet", "seq2seq", "ProphetNetConfig", "ProphetNetForConditionalGeneration",
       dict(vocab_size=100, hidden_size=32, encoder_ffn_dim=64, decoder_ffn_dim=64, num_encoder_layers=2,
            num_decoder_layers=2, num_encoder_attention_heads=2, num_decoder_attention_heads=2, ngram=2,
            num_buckets=8, relative_max_distance=16, max_position_embeddings=64, decoder_start_token_id=0),
       inputs.seq2seq),
    _a("bigbird_pegasus", "seq2seq", "BigBirdPegasusConfig", "BigBirdPegasusForConditionalGeneration",
       dict(_SEQ2SEQ, attention_type="original_full"), inputs.seq2seq),
    _a("nllb_moe", "moe", "NllbMoeConfig", "NllbMoeForConditionalGeneration",
       dict(_SEQ2SEQ, num_experts=4, expert_capacity=8, encoder_sparse_step=1, decoder_sparse_step=1),
       inputs.seq2seq),
    # vision
    _a("yolos", "vision", "YolosConfig", "YolosModel", dict(_VIT, image_size=[32, 32], num_detection_tokens=4), inputs.pixels),
    _a("vit_msn", "vision", "ViTMSNConfig", "ViTMSNModel", _VIT, inputs.pixels),
    _a("data2vec_vision", "vision", "Data2VecVisionConfig", "Data2VecVisionModel",
       dict(_VIT, use_relative_position_bias=True), inputs.pixels),
    _a("dinov2_registers", "vision", "Dinov2WithRegistersConfig", "Dinov2WithRegistersModel",
       dict(_VIT, num_register_tokens=2), inputs.pixels),
    _a("swinv2", "vision", "Swinv2Config", "Swinv2Model",
       dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[1, 2], window_size=4),
       inputs.pixels),
    _a("focalnet", "vision", "FocalNetConfig", "FocalNetModel",
       dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], focal_levels=[2, 2], focal_windows=[3, 3]),
       inputs.pixels),
    _a("mobilenet_v2", "vision", "MobileNetV2Config", "MobileNetV2Model",
       dict(image_size=32, depth_multiplier=0.25), inputs.pixels),
    _a("mobilenet_v1", "vision", "MobileNetV1Config", "MobileNetV1Model",
       dict(image_size=32, depth_multiplier=0.25), inputs.pixels),
    _a("mobilevit", "vision", "MobileViTConfig", "MobileViTModel",
       dict(image_size=32, patch_size=2, hidden_sizes=[16, 24, 32], neck_hidden_sizes=[8, 8, 16, 16, 24, 24, 32],
            num_attention_heads=2), inputs.pixels),
    _a("levit", "vision", "LevitConfig", "LevitModel",
       dict(image_size=32, hidden_sizes=[16, 24, 32], num_attention_heads=[1, 2, 2], depths=[1, 1, 1],
            key_dim=[8, 8, 8]), inputs.pixels),
    _a("pvt", "vision", "PvtConfig", "PvtModel",
       dict(image_size=32, num_encoder_blocks=2, depths=[1, 1], sequence_reduction_ratios=[2, 1],
            hidden_sizes=[8, 16], num_attention_heads=[1, 2], patch_sizes=[4, 2], strides=[4, 2],
            mlp_ratios=[2, 2]), inputs.pixels),
    _a("pvt_v2", "vision", "PvtV2Config", "PvtV2Model",
       dict(image_size=32, num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
            num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2]), inputs.pixels),
    _a("bit", "vision", "BitConfig", "BitModel",
       dict(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="bottleneck", num_groups=2),
       inputs.pixels),
    _a("vit_mae", "vision", "ViTMAEConfig", "ViTMAEModel", dict(_VIT, mask_ratio=0.0), inputs.pixels),
    _a("hiera", "vision", "HieraConfig", "HieraModel",
       dict(image_size=[32, 32], patch_size=[3, 3], patch_stride=[2, 2], patch_padding=[1, 1], embed_dim=8,
            depths=[1, 1], num_heads=[1, 2], query_stride=[2, 2], masked_unit_size=[4, 4], num_query_pool=1), inputs.pixels),
    _a("vitdet", "vision", "VitDetConfig", "VitDetModel",
       dict(_VIT, pretrain_image_size=32, window_size=2, window_block_indices=[0]), inputs.pixels),
    _a("glpn", "vision", "GLPNConfig", "GLPNModel",
       dict(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
            num_attention_heads=[1, 2], patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2]), inputs.pixels),
    _a("swiftformer", "vision", "SwiftFormerConfig", "SwiftFormerModel",
       dict(depths=[1, 1, 1, 1], embed_dims=[8, 16, 24, 32]), inputs.pixels),
    _a("conditional_detr", "vision", "ConditionalDetrConfig", "ConditionalDetrModel",
       dict(use_timm_backbone=False, use_pretrained_backbone=False, backbone=None,
            backbone_config=dict(model_type="resnet", embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1],
                                 layer_type="basic", out_features=["stage2"]),
            d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
            encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=4), inputs.pixels),
    # detection heads (hsweep11): DETR's set-prediction head, Deformable DETR's multi-scale deformable attention
    # (its pure-PyTorch path), RT-DETR's hybrid encoder and query selection, YOLOS's detection tokens
    _a("detr_detection", "vision", "DetrConfig", "DetrForObjectDetection",
       dict(_DETR, num_labels=5), inputs.pixels),
    _a("deformable_detr", "vision", "DeformableDetrConfig", "DeformableDetrForObjectDetection",
       dict(_DETR, decoder_layers=2, num_labels=5, num_feature_levels=2, encoder_n_points=2, decoder_n_points=2,
            disable_custom_kernels=True,
            backbone_config=dict(_DETR["backbone_config"], hidden_sizes=[8, 16, 16], depths=[1, 1, 1],
                                 out_features=["stage2", "stage3"])), inputs.pixels),
    _a("rt_detr", "vision", "RTDetrConfig", "RTDetrForObjectDetection",
       dict(backbone_config=dict(model_type="rt_detr_resnet", embedding_size=8, hidden_sizes=[8, 16, 16, 16],
                                 depths=[1, 1, 1, 1], layer_type="basic", out_features=["stage2", "stage3", "stage4"]),
            use_pretrained_backbone=False, use_timm_backbone=False, encoder_hidden_dim=32,
            encoder_in_channels=[16, 16, 16], feat_strides=[8, 16, 32], encoder_ffn_dim=32, encoder_attention_heads=2,
            d_model=32, decoder_in_channels=[32, 32, 32], decoder_ffn_dim=64, decoder_attention_heads=2,
            decoder_layers=1, num_queries=8, num_labels=5, num_denoising=0, decoder_n_points=2,
            encode_proj_layers=[2]), _pixels_64),
    _a("yolos_detection", "vision", "YolosConfig", "YolosForObjectDetection",
       dict(_VIT, image_size=[32, 32], num_detection_tokens=4, num_labels=5), inputs.pixels),
    # audio
    _a("unispeech", "audio", "UniSpeechConfig", "UniSpeechModel", _AUDIO, inputs.waveform),
    _a("sew", "audio", "SEWConfig", "SEWModel", dict(_AUDIO, squeeze_factor=2), inputs.waveform),
    _a("sew_d", "audio", "SEWDConfig", "SEWDModel",
       dict(_AUDIO, squeeze_factor=2, max_position_embeddings=32, position_buckets=8), inputs.waveform),
    _a("data2vec_audio", "audio", "Data2VecAudioConfig", "Data2VecAudioModel",
       dict(_AUDIO, num_conv_pos_embeddings=4, num_conv_pos_embedding_groups=2), inputs.waveform),
    _a("wav2vec2_conformer", "audio", "Wav2Vec2ConformerConfig", "Wav2Vec2ConformerModel",
       dict(_AUDIO, position_embeddings_type="rotary", conv_depthwise_kernel_size=3), inputs.waveform),
    _a("speech_to_text", "audio", "Speech2TextConfig", "Speech2TextForConditionalGeneration",
       dict(_SEQ2SEQ, input_feat_per_channel=16, input_channels=1, conv_channels=16, conv_kernel_sizes=[5, 5],
            max_source_positions=64, max_target_positions=64), _frames_seq2seq),
    _a("moonshine", "audio", "MoonshineConfig", "MoonshineForConditionalGeneration",
       dict(vocab_size=100, hidden_size=32, intermediate_size=64, encoder_num_hidden_layers=2,
            decoder_num_hidden_layers=2, encoder_num_attention_heads=2, decoder_num_attention_heads=2,
            max_position_embeddings=64, decoder_start_token_id=1, pad_token_id=0, bos_token_id=1,
            eos_token_id=2), _long_waveform_seq2seq),
    # a vocoder: kernel-predicted location-variable convolutions. Without noise_sequence it draws
    # torch.randn(shape, generator=None, ...), which ran its frame eagerly once sizes were symbolic (NOTE
    # [Symbolic sizes an op refuses], tests/capture/test_sym_sizes_refused.py); a Generator passed in is a break
    _a("univnet", "audio", "UnivNetConfig", "UnivNetModel",
       dict(model_in_channels=8, model_hidden_channels=8, num_mel_bins=16, resblock_kernel_sizes=[3],
            resblock_stride_sizes=[4], resblock_dilation_sizes=[[1, 3]], kernel_predictor_num_blocks=1,
            kernel_predictor_hidden_channels=8), _spectrogram_frames, resize=True),
    # document layout: text, 2-D boxes and image patches in one encoder (hsweep11)
    _a("layoutlmv3", "encoder", "LayoutLMv3Config", "LayoutLMv3Model",
       dict(_TEXT, input_size=32, patch_size=8, max_2d_position_embeddings=1024, coordinate_size=4, shape_size=8,
            rel_pos_bins=8, max_rel_pos=16, rel_2d_pos_bins=16, max_rel_2d_pos=64), _text_boxes_pixels),
    # multimodal towers
    _a("siglip_text", "encoder", "SiglipTextConfig", "SiglipTextModel", dict(_TEXT, max_position_embeddings=16),
       inputs.ids_only),
    _a("blip_vision", "vision", "BlipVisionConfig", "BlipVisionModel", _VIT, inputs.pixels),
    _a("owlvit_vision", "vision", "OwlViTVisionConfig", "OwlViTVisionModel", _VIT, inputs.pixels),
]

EXTRA: dict[str, Arch] = {a.name: a for a in _EXTRA}

__all__ = ["EXTRA"]
