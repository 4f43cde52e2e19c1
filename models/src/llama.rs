//! Llama-family decoder (Llama 2/3, Mistral without a sliding window, SmolLM, TinyLlama; Qwen2's
//! q/k/v biases): token embedding, `layers` pre-norm blocks with rotary, grouped-query causal
//! attention and a SwiGLU MLP, and an RMSNorm + Linear head — what transformers'
//! `LlamaForCausalLM` computes, one stageable layer per item.
//!
//! ```text
//!   [N, T] token ids (int)
//!   Embedding  embed_tokens[ids]                            bundle {x: [N, T, D], positions: [N, T] int}
//!   Block      x += o(attn(rope(q(n1(x))), rope(k(n1(x))), v(n1(x))))   (GQA: kv heads repeated)
//!              x += down(silu(gate(n2(x))) · up(n2(x)))                   (× layers)
//!   Head       norm(x) → lm_head                                          [N, T, V] logits
//! ```
//!
//! `n1`, `n2` and `norm` are RMSNorms (`rms_norm_eps`); rotary embeddings rotate each head's two
//! halves (transformers' `rotate_half`) by `position · rope_theta^(-2i/head_dim)`; each of
//! `num_key_value_heads` key/value heads serves `heads / kv_heads` consecutive query heads. As
//! in [`crate::gpt`], the hidden state crosses stages with its position ids as a [`Bundle`], and
//! each block masks keys whose position is later than the query's.
//!
//! Under bf16 it computes as transformers' model does under `torch.autocast(dtype=bfloat16)`
//! (`tests/torch/llama.rs` holds it to such a run): only the `Linear`s are cast to bf16
//! ([`Layer::compute_copy`]); the embedding and the RMSNorm weights stay fp32, so the residual
//! stream, the norms, the rotary embedding and the softmax are fp32, each `Linear` and each
//! attention product takes its operands cast to bf16 one use at a time, and the hidden state
//! crosses stages in fp32 ([`Layer::keeps_input_dtype`]).
//!
//! [`LlamaConfig::from_hf_config`] reads a Hugging Face `config.json`;
//! [`LlamaConfig::from_hf_tensors`] builds the layers from its checkpoint's tensors (names and
//! layouts mapped, shapes checked); [`LlamaConfig::hf_tensors`] gives them back under the
//! Hugging Face names and layouts.

use std::collections::BTreeMap;

use burn::nn::{Embedding, EmbeddingConfig, Initializer, Linear, LinearConfig, RmsNorm};
use burn::prelude::*;
use burn::tensor::activation::{silu, softmax};
use burn::tensor::{Bool, FloatDType, TensorData};
use pipetrain_engine::{
    Activation, Bundle, EngineError, Layer, Linears, cast_module, downcast_like, matmul, parameter,
    saved, upcast, upcast_module,
};

/// The shape of a Llama-family decoder: the fields of transformers' `LlamaConfig` it
/// implements.
///
/// ```
/// use burn::prelude::*;
/// use burn::tensor::Int;
/// use pipetrain_engine::Layer;
/// use pipetrain_models::LlamaConfig;
/// let device = Device::flex();
/// let config = LlamaConfig::new(32, 16, 24, 2, 4, 2);
/// let layers = config.init(&device);
/// assert_eq!(layers.len(), 4); // embedding + 2 blocks + head
/// let mut x = Tensor::<2, Int>::zeros([3, 5], &device).into();
/// for layer in &layers {
///     x = layer.forward(x).unwrap();
/// }
/// assert_eq!(x.dims(), vec![3, 5, 32]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LlamaConfig {
    /// `vocab_size`: token ids are in `0..vocab`.
    pub vocab: usize,
    /// `hidden_size` D.
    pub hidden: usize,
    /// `intermediate_size`: the SwiGLU MLP's width.
    pub intermediate: usize,
    /// `num_hidden_layers`: transformer blocks.
    pub layers: usize,
    /// `num_attention_heads`.
    pub heads: usize,
    /// `num_key_value_heads` (grouped-query attention); divides `heads`.
    pub kv_heads: usize,
    /// `head_dim` (transformers' default: `hidden_size / num_attention_heads`); even.
    pub head_dim: usize,
    /// `rms_norm_eps`.
    pub rms_norm_eps: f64,
    /// `rope_theta`: the rotary base.
    pub rope_theta: f64,
    /// `max_position_embeddings`: the longest sequence accepted.
    pub max_positions: usize,
    /// Biases on the q, k and v projections (`attention_bias`; Qwen2 always).
    pub qkv_bias: bool,
    /// A bias on the output projection (`attention_bias` in Llama; never in Qwen2).
    pub output_bias: bool,
    /// `mlp_bias`: biases on gate, up and down.
    pub mlp_bias: bool,
    /// `tie_word_embeddings`: the head's projection is the token embedding, transposed.
    pub tie_word_embeddings: bool,
    /// `initializer_range`: the std of the normal init of every projection and the embedding.
    pub initializer_range: f64,
}

impl LlamaConfig {
    /// A decoder of `vocab` tokens, width `hidden`, SwiGLU width `intermediate`, `layers`
    /// blocks, `heads` query heads and `kv_heads` key/value heads; transformers' defaults
    /// otherwise (`head_dim = hidden / heads`, eps 1e-6, theta 10000, 2048 positions, no biases,
    /// untied, init std 0.02).
    pub fn new(
        vocab: usize,
        hidden: usize,
        intermediate: usize,
        layers: usize,
        heads: usize,
        kv_heads: usize,
    ) -> Self {
        Self {
            vocab,
            hidden,
            intermediate,
            layers,
            heads,
            kv_heads,
            head_dim: hidden / heads.max(1),
            rms_norm_eps: 1e-6,
            rope_theta: 10000.0,
            max_positions: 2048,
            qkv_bias: false,
            output_bias: false,
            mlp_bias: false,
            tie_word_embeddings: false,
            initializer_range: 0.02,
        }
    }

    /// The configuration a Hugging Face `config.json` describes (`model_type` `llama`, `mistral`
    /// or `qwen2`).
    ///
    /// # Errors
    /// The field that is missing, malformed or not implemented (a `rope_scaling`, a Mistral
    /// `sliding_window` shorter than the context, an activation other than SiLU, heads that do
    /// not divide), with what to do instead.
    pub fn from_hf_config(json: &str) -> Result<Self, String> {
        let value: serde_json::Value =
            serde_json::from_str(json).map_err(|e| format!("not JSON: {e}"))?;
        let get = |key: &str| value.get(key).filter(|v| !v.is_null());
        let usize_of = |key: &str| -> Result<usize, String> {
            get(key)
                .ok_or_else(|| format!("`{key}` is missing"))?
                .as_u64()
                .map(|v| v as usize)
                .ok_or_else(|| format!("`{key}` is not a non-negative integer"))
        };
        let f64_or = |key: &str, default: f64| -> Result<f64, String> {
            match get(key) {
                None => Ok(default),
                Some(v) => v.as_f64().ok_or_else(|| format!("`{key}` is not a number")),
            }
        };
        let bool_or = |key: &str, default: bool| -> Result<bool, String> {
            match get(key) {
                None => Ok(default),
                Some(v) => v
                    .as_bool()
                    .ok_or_else(|| format!("`{key}` is not true or false")),
            }
        };
        let model_type = get("model_type")
            .and_then(|v| v.as_str())
            .ok_or("`model_type` is missing")?;
        if !matches!(model_type, "llama" | "mistral" | "qwen2") {
            return Err(format!(
                "model_type `{model_type}` is not a Llama-family decoder pipetrain implements \
                 (llama, mistral, qwen2); convert the checkpoint to one of those or train it with \
                 its own library"
            ));
        }
        // transformers 4 writes `rope_theta` and `rope_scaling`; transformers 5 writes
        // `rope_parameters: {rope_theta, rope_type, ...}`.
        for field in ["rope_scaling", "rope_parameters"] {
            if let Some(scaling) = get(field) {
                let kind = scaling
                    .get("rope_type")
                    .or_else(|| scaling.get("type"))
                    .and_then(|v| v.as_str())
                    .unwrap_or("default");
                if kind != "default" {
                    return Err(format!(
                        "`{field}` of type `{kind}` is not implemented (only plain rotary \
                         embeddings); use a checkpoint without it, or set its type to default \
                         if your sequences stay within the original context"
                    ));
                }
            }
        }
        let rope_theta = match get("rope_parameters").and_then(|p| p.get("rope_theta")) {
            Some(theta) => theta
                .as_f64()
                .ok_or("`rope_parameters.rope_theta` is not a number")?,
            None => f64_or("rope_theta", 10000.0)?,
        };
        let act = get("hidden_act").and_then(|v| v.as_str()).unwrap_or("silu");
        if act != "silu" {
            return Err(format!(
                "`hidden_act` `{act}` is not implemented (the SwiGLU MLP uses silu)"
            ));
        }
        let heads = usize_of("num_attention_heads")?;
        let hidden = usize_of("hidden_size")?;
        let kv_heads = match get("num_key_value_heads") {
            None => heads,
            Some(_) => usize_of("num_key_value_heads")?,
        };
        let max_positions = usize_of("max_position_embeddings")?;
        if model_type == "mistral"
            && let Some(window) = get("sliding_window").and_then(|v| v.as_u64())
            && (window as usize) < max_positions
        {
            return Err(format!(
                "`sliding_window` {window} is shorter than max_position_embeddings \
                 {max_positions}: sliding-window attention is not implemented; set \
                 sliding_window to null or to at least max_position_embeddings"
            ));
        }
        let attention_bias = bool_or("attention_bias", false)?;
        let config = Self {
            vocab: usize_of("vocab_size")?,
            hidden,
            intermediate: usize_of("intermediate_size")?,
            layers: usize_of("num_hidden_layers")?,
            heads,
            kv_heads,
            head_dim: match get("head_dim") {
                None => hidden / heads.max(1),
                Some(_) => usize_of("head_dim")?,
            },
            rms_norm_eps: f64_or("rms_norm_eps", 1e-6)?,
            rope_theta,
            max_positions,
            qkv_bias: model_type == "qwen2" || attention_bias,
            output_bias: model_type != "qwen2" && attention_bias,
            mlp_bias: bool_or("mlp_bias", false)?,
            tie_word_embeddings: bool_or("tie_word_embeddings", false)?,
            initializer_range: f64_or("initializer_range", 0.02)?,
        };
        config.check()?;
        Ok(config)
    }

    /// Refuses shapes no decoder has.
    ///
    /// # Errors
    /// The first field that is zero, odd where it must be even, or does not divide.
    pub fn check(&self) -> Result<(), String> {
        for (name, value) in [
            ("vocab_size", self.vocab),
            ("hidden_size", self.hidden),
            ("intermediate_size", self.intermediate),
            ("num_attention_heads", self.heads),
            ("num_key_value_heads", self.kv_heads),
            ("head_dim", self.head_dim),
            ("max_position_embeddings", self.max_positions),
        ] {
            if value == 0 {
                return Err(format!("`{name}` is 0"));
            }
        }
        if self.heads % self.kv_heads != 0 {
            return Err(format!(
                "num_key_value_heads {} does not divide num_attention_heads {}",
                self.kv_heads, self.heads
            ));
        }
        if self.head_dim % 2 != 0 {
            return Err(format!(
                "head_dim {} is odd: rotary embeddings rotate pairs",
                self.head_dim
            ));
        }
        Ok(())
    }

    /// The tie between the token embedding (`0.token.weight`, `[vocab, hidden]`) and the head's
    /// projection (`{layers + 1}.unembed.weight`, `[hidden, vocab]`), as the GPT's
    /// ([`GptConfig::tie_embeddings`](crate::GptConfig::tie_embeddings)): give it to
    /// `Pipeline::builder().tie(..)` when `tie_word_embeddings`.
    pub fn tie_embeddings(&self) -> pipetrain_engine::Tie {
        pipetrain_engine::Tie::transposed(
            "0.token.weight",
            format!("{}.unembed.weight", self.layers + 1),
        )
    }

    /// The layer sequence, randomly initialised as transformers does (every projection and
    /// the embedding `N(0, initializer_range²)`, biases 0, norms 1); a tied head starts as the
    /// embedding's transpose.
    ///
    /// # Panics
    /// If [`check`](Self::check) refuses the shape.
    pub fn init(&self, device: &Device) -> Vec<LlamaLayer> {
        if let Err(e) = self.check() {
            panic!("LlamaConfig: {e}");
        }
        let normal = Initializer::Normal {
            mean: 0.0,
            std: self.initializer_range,
        };
        let zero_bias = |l: Linear| Linear {
            bias: l.bias.map(|b| b.map(|t| t.zeros_like())),
            ..l
        };
        let linear = |i: usize, o: usize, bias: bool| {
            zero_bias(
                LinearConfig::new(i, o)
                    .with_bias(bias)
                    .with_initializer(normal.clone())
                    .init(device),
            )
        };
        let embedding = EmbeddingConfig::new(self.vocab, self.hidden)
            .with_initializer(normal.clone())
            .init(device);
        let unembed = match self.tie_word_embeddings {
            true => Linear {
                weight: parameter(embedding.weight.val().transpose()),
                bias: None,
            },
            false => linear(self.hidden, self.vocab, false),
        };
        let mut layers = vec![LlamaLayer::Embedding(TokenEmbedding { token: embedding })];
        let (q, kv) = (self.heads * self.head_dim, self.kv_heads * self.head_dim);
        for _ in 0..self.layers {
            layers.push(LlamaLayer::Block(LlamaBlock {
                input_norm: self.norm(Tensor::ones([self.hidden], device)),
                attention: self.attention(
                    linear(self.hidden, q, self.qkv_bias),
                    linear(self.hidden, kv, self.qkv_bias),
                    linear(self.hidden, kv, self.qkv_bias),
                    linear(q, self.hidden, self.output_bias),
                ),
                post_norm: self.norm(Tensor::ones([self.hidden], device)),
                mlp: SwiGlu {
                    gate: linear(self.hidden, self.intermediate, self.mlp_bias),
                    up: linear(self.hidden, self.intermediate, self.mlp_bias),
                    down: linear(self.intermediate, self.hidden, self.mlp_bias),
                },
            }));
        }
        layers.push(LlamaLayer::Head(LlamaHead {
            norm: self.norm(Tensor::ones([self.hidden], device)),
            unembed,
        }));
        layers
    }

    fn norm(&self, gamma: Tensor<1>) -> RmsNorm {
        RmsNorm {
            gamma: parameter(gamma),
            epsilon: self.rms_norm_eps,
        }
    }

    fn attention(
        &self,
        query: Linear,
        key: Linear,
        value: Linear,
        output: Linear,
    ) -> GroupedQueryAttention {
        GroupedQueryAttention {
            query,
            key,
            value,
            output,
            heads: self.heads,
            kv_heads: self.kv_heads,
            head_dim: self.head_dim,
            rope_theta: self.rope_theta,
        }
    }

    /// The Hugging Face tensor names of this model, each with its shape in Hugging Face's
    /// layout (`[out, in]` projections), in the order of the layers. A tied model has no
    /// `lm_head.weight`.
    pub fn hf_names(&self) -> Vec<(String, Vec<usize>)> {
        let (d, q, kv) = (
            self.hidden,
            self.heads * self.head_dim,
            self.kv_heads * self.head_dim,
        );
        let mut names = vec![("model.embed_tokens.weight".to_string(), vec![self.vocab, d])];
        for i in 0..self.layers {
            let p = format!("model.layers.{i}");
            names.push((format!("{p}.input_layernorm.weight"), vec![d]));
            for (proj, out, inp, bias) in [
                ("q_proj", q, d, self.qkv_bias),
                ("k_proj", kv, d, self.qkv_bias),
                ("v_proj", kv, d, self.qkv_bias),
                ("o_proj", d, q, self.output_bias),
            ] {
                names.push((format!("{p}.self_attn.{proj}.weight"), vec![out, inp]));
                if bias {
                    names.push((format!("{p}.self_attn.{proj}.bias"), vec![out]));
                }
            }
            names.push((format!("{p}.post_attention_layernorm.weight"), vec![d]));
            for (proj, out, inp) in [
                ("gate_proj", self.intermediate, d),
                ("up_proj", self.intermediate, d),
                ("down_proj", d, self.intermediate),
            ] {
                names.push((format!("{p}.mlp.{proj}.weight"), vec![out, inp]));
                if self.mlp_bias {
                    names.push((format!("{p}.mlp.{proj}.bias"), vec![out]));
                }
            }
        }
        names.push(("model.norm.weight".to_string(), vec![d]));
        if !self.tie_word_embeddings {
            names.push(("lm_head.weight".to_string(), vec![self.vocab, d]));
        }
        names
    }

    /// The layers from a Hugging Face checkpoint's tensors (`tensors`: name → fp32 data in
    /// Hugging Face's layout, e.g. every tensor of its safetensors files): projections
    /// transposed to burn's `[in, out]`, a tied head made the embedding's transpose.
    ///
    /// # Errors
    /// A tensor this configuration needs that is missing, one whose shape differs (naming
    /// both shapes), or one the model has no place for (a checkpoint of another shape).
    pub fn from_hf_tensors(
        &self,
        tensors: &BTreeMap<String, TensorData>,
        device: &Device,
    ) -> Result<Vec<LlamaLayer>, String> {
        self.check()?;
        let wanted = self.hf_names();
        for (name, shape) in &wanted {
            let data = tensors.get(name).ok_or_else(|| {
                format!("tensor `{name}` (shape {shape:?}) is missing from the checkpoint")
            })?;
            let got = data.shape().to_vec();
            if &got != shape {
                return Err(format!(
                    "tensor `{name}` has shape {got:?} in the checkpoint, the model's config needs \
                     {shape:?}"
                ));
            }
        }
        // Tied checkpoints may still store the head; rotary caches are buffers.
        let known = |k: &str| {
            wanted.iter().any(|(w, _)| w == k)
                || (self.tie_word_embeddings && k == "lm_head.weight")
                || k.ends_with("rotary_emb.inv_freq")
        };
        if let Some(extra) = tensors.keys().find(|k| !known(k)) {
            return Err(format!(
                "tensor `{extra}` of the checkpoint has no place in this model (another \
                 architecture or config.json?)"
            ));
        }
        let take = |name: &str| -> TensorData { tensors[name].clone().convert::<f32>() };
        let vector = |name: &str| Tensor::<1>::from_data(take(name), device);
        let matrix = |name: &str| Tensor::<2>::from_data(take(name), device);
        let linear = |name: &str, bias: bool| Linear {
            weight: parameter(matrix(&format!("{name}.weight")).transpose()),
            bias: bias.then(|| parameter(vector(&format!("{name}.bias")))),
        };
        let embedding = Embedding {
            weight: parameter(matrix("model.embed_tokens.weight")),
        };
        let unembed = match self.tie_word_embeddings {
            true => Linear {
                weight: parameter(embedding.weight.val().transpose()),
                bias: None,
            },
            false => linear("lm_head", false),
        };
        let mut layers = vec![LlamaLayer::Embedding(TokenEmbedding { token: embedding })];
        for i in 0..self.layers {
            let p = format!("model.layers.{i}");
            let a = format!("{p}.self_attn");
            let m = format!("{p}.mlp");
            layers.push(LlamaLayer::Block(LlamaBlock {
                input_norm: self.norm(vector(&format!("{p}.input_layernorm.weight"))),
                attention: self.attention(
                    linear(&format!("{a}.q_proj"), self.qkv_bias),
                    linear(&format!("{a}.k_proj"), self.qkv_bias),
                    linear(&format!("{a}.v_proj"), self.qkv_bias),
                    linear(&format!("{a}.o_proj"), self.output_bias),
                ),
                post_norm: self.norm(vector(&format!("{p}.post_attention_layernorm.weight"))),
                mlp: SwiGlu {
                    gate: linear(&format!("{m}.gate_proj"), self.mlp_bias),
                    up: linear(&format!("{m}.up_proj"), self.mlp_bias),
                    down: linear(&format!("{m}.down_proj"), self.mlp_bias),
                },
            }));
        }
        layers.push(LlamaLayer::Head(LlamaHead {
            norm: self.norm(vector("model.norm.weight")),
            unembed,
        }));
        Ok(layers)
    }

    /// How far a tied model's head is from its token embedding's transpose (the largest
    /// absolute difference): 0 when the two were trained as one (the engine's tie), more when
    /// they were trained apart. `None` for an untied configuration or another layer sequence.
    pub fn tie_drift(&self, layers: &[LlamaLayer]) -> Option<f32> {
        if !self.tie_word_embeddings {
            return None;
        }
        let embedding = layers.iter().find_map(|l| match l {
            LlamaLayer::Embedding(e) => Some(e.token.weight.val()),
            _ => None,
        })?;
        let head = layers.iter().find_map(|l| match l {
            LlamaLayer::Head(h) => Some(h.unembed.weight.val()),
            _ => None,
        })?;
        let head = head.to_device(&embedding.device()).transpose();
        if embedding.dims() != head.dims() {
            return None;
        }
        let drift = (embedding - head).abs().max().into_data();
        drift
            .convert::<f32>()
            .try_to_vec::<f32>()
            .ok()?
            .first()
            .copied()
    }

    /// The tensors of `layers` (this configuration's) under their Hugging Face names and in
    /// Hugging Face's layout, fp32: what `model.safetensors` holds for transformers'
    /// `from_pretrained`. A tied model writes no `lm_head.weight`.
    ///
    /// # Panics
    /// If `layers` are not this configuration's sequence.
    pub fn hf_tensors(&self, layers: &[LlamaLayer]) -> BTreeMap<String, TensorData> {
        let mut out = BTreeMap::new();
        let mut put = |name: String, t: TensorData| {
            out.insert(name, t);
        };
        let linear = |put: &mut dyn FnMut(String, TensorData), name: &str, l: &Linear| {
            put(
                format!("{name}.weight"),
                l.weight.val().transpose().into_data().convert::<f32>(),
            );
            if let Some(b) = &l.bias {
                put(format!("{name}.bias"), b.val().into_data().convert::<f32>());
            }
        };
        let mut block = 0;
        for layer in layers {
            match layer {
                LlamaLayer::Embedding(e) => put(
                    "model.embed_tokens.weight".into(),
                    e.token.weight.val().into_data().convert::<f32>(),
                ),
                LlamaLayer::Block(b) => {
                    let p = format!("model.layers.{block}");
                    put(
                        format!("{p}.input_layernorm.weight"),
                        b.input_norm.gamma.val().into_data().convert::<f32>(),
                    );
                    let a = &b.attention;
                    for (proj, l) in [
                        ("q_proj", &a.query),
                        ("k_proj", &a.key),
                        ("v_proj", &a.value),
                        ("o_proj", &a.output),
                    ] {
                        linear(&mut put, &format!("{p}.self_attn.{proj}"), l);
                    }
                    put(
                        format!("{p}.post_attention_layernorm.weight"),
                        b.post_norm.gamma.val().into_data().convert::<f32>(),
                    );
                    for (proj, l) in [
                        ("gate_proj", &b.mlp.gate),
                        ("up_proj", &b.mlp.up),
                        ("down_proj", &b.mlp.down),
                    ] {
                        linear(&mut put, &format!("{p}.mlp.{proj}"), l);
                    }
                    block += 1;
                }
                LlamaLayer::Head(h) => {
                    put(
                        "model.norm.weight".into(),
                        h.norm.gamma.val().into_data().convert::<f32>(),
                    );
                    if !self.tie_word_embeddings {
                        linear(&mut put, "lm_head", &h.unembed);
                    }
                }
            }
        }
        assert_eq!(block, self.layers, "layers of another LlamaConfig");
        out
    }
}

/// The token embedding (no position embedding: positions enter through the rotary
/// embeddings).
#[derive(Module, Debug)]
pub struct TokenEmbedding {
    /// `[vocab, hidden]`: row `i` is token `i`'s vector (`model.embed_tokens.weight`).
    pub token: Embedding,
}

/// Causal self-attention with rotary position embeddings and grouped key/value heads.
#[derive(Module, Debug)]
pub struct GroupedQueryAttention {
    /// D → heads·head_dim (`q_proj`).
    pub query: Linear,
    /// D → kv_heads·head_dim (`k_proj`).
    pub key: Linear,
    /// D → kv_heads·head_dim (`v_proj`).
    pub value: Linear,
    /// heads·head_dim → D (`o_proj`).
    pub output: Linear,
    /// Query heads (a constant).
    pub heads: usize,
    /// Key/value heads (a constant); each serves `heads / kv_heads` consecutive query heads.
    pub kv_heads: usize,
    /// Width of a head (a constant).
    pub head_dim: usize,
    /// The rotary base (a constant).
    pub rope_theta: f64,
}

impl GroupedQueryAttention {
    /// `[N, T, D] → [N, T, D]` with the projections called through `linears`; token `i`
    /// attends to the tokens whose position (`[N, T]` ids) is at most its own.
    pub fn forward_linears(
        &self,
        x: Tensor<3>,
        positions: Tensor<2, Int>,
        linears: &mut Linears,
    ) -> Tensor<3> {
        let [n, t, _] = x.dims();
        let (h, kv, dh) = (self.heads, self.kv_heads, self.head_dim);
        let [q, k, v] = project_each(linears, [&self.query, &self.key, &self.value], x);
        let q = q.reshape([n, t, h, dh]).swap_dims(1, 2);
        let k = k.reshape([n, t, kv, dh]).swap_dims(1, 2);
        let v = v.reshape([n, t, kv, dh]).swap_dims(1, 2);
        let positions = positions.to_device(&q.device());
        // Rotated in fp32 (the fp32 cos and sin promote q and k, as in transformers).
        let (cos, sin) = self.rotary(positions.clone());
        let q = rotate(q, cos.clone(), sin.clone());
        let k = rotate(k, cos, sin);
        // Each key/value head serves `h / kv` consecutive query heads (transformers' repeat_kv).
        let repeat = |y: Tensor<4>| {
            y.reshape([n, kv, 1, t, dh])
                .expand([n, kv, h / kv, t, dh])
                .reshape([n, h, t, dh])
        };
        let (k, v) = (repeat(k), repeat(v));
        // Each product takes its operands in the compute dtype (`v`'s, a projection's output).
        let scores = matmul(downcast_like(q, &v), downcast_like(k.swap_dims(2, 3), &v));
        // The scale multiplies in fp32 and rounds once, as PyTorch's bf16 `mul` by a scalar.
        let scores = downcast_like(
            upcast(scores.clone()).mul_scalar(1.0 / (dh as f64).sqrt()),
            &scores,
        );
        let query = positions.clone().reshape([n, t, 1]).expand([n, t, t]);
        let key = positions.reshape([n, 1, t]).expand([n, t, t]);
        let future: Tensor<4, Bool> = key
            .greater(query)
            .reshape([n, 1, t, t])
            .expand([n, h, t, t]);
        let weights = softmax(upcast(scores).mask_fill(future, -1e9), 3);
        let y = matmul(downcast_like(weights, &v), v)
            .swap_dims(1, 2)
            .reshape([n, t, h * dh]);
        project(linears, &self.output, y)
    }

    /// cos and sin of every position's angles, `[N, 1, T, head_dim]` in fp32: angle `j` of
    /// position `p` is `p · theta^(-2j/head_dim)`, both halves alike (transformers'
    /// `cat((freqs, freqs))`).
    fn rotary(&self, positions: Tensor<2, Int>) -> (Tensor<4>, Tensor<4>) {
        let [n, t] = positions.dims();
        let half = self.head_dim / 2;
        // As transformers: inv_freq = 1 / theta^(arange(0, dim, 2) / dim), in fp32.
        let inv: Vec<f32> = (0..half)
            .map(|j| {
                let exponent = (2 * j) as f32 / self.head_dim as f32;
                1.0 / (self.rope_theta as f32).powf(exponent)
            })
            .collect();
        let device = positions.device();
        let inv =
            Tensor::<1>::from_data(TensorData::new(inv, [half]), &device).reshape([1, 1, half]);
        let angles = upcast(positions.float().reshape([n, t, 1])).mul(inv);
        let angles = Tensor::cat(vec![angles.clone(), angles], 2).reshape([n, 1, t, 2 * half]);
        (angles.clone().cos(), angles.sin())
    }
}

/// `x · cos + rotate_half(x) · sin` in fp32 (`cos` and `sin` are), `rotate_half(x) = [-x₂, x₁]`
/// of its two halves taken in `x`'s dtype: under bf16 each of `x`'s two uses casts up on its
/// own, so its gradient rounds to bf16 per use, as PyTorch's type promotion does.
fn rotate(x: Tensor<4>, cos: Tensor<4>, sin: Tensor<4>) -> Tensor<4> {
    let [_, _, _, dh] = x.dims();
    let first = x.clone().narrow(3, 0, dh / 2);
    let second = x.clone().narrow(3, dh / 2, dh / 2);
    let rotated = Tensor::cat(vec![second.neg(), first], 3);
    upcast(x) * cos + upcast(rotated) * sin
}

/// `linear` applied to `x` cast to the layer's dtype, one cast per call, as autocast casts an
/// op's fp32 input (a no-op in fp32): inputs shared by several projections get their
/// gradients summed in fp32.
fn project(linears: &mut Linears, linear: &Linear, x: Tensor<3>) -> Tensor<3> {
    let x = downcast_like(x, &linear.weight.val());
    linears.forward(linear, x)
}

/// [`project`] of each of `each` on the one input `x`. Where no cast is needed (the layers in
/// `x`'s dtype: fp32) one call through [`Linears::forward_each`], so a split backward keeps `x`
/// once; otherwise one cast a call, as [`project`].
fn project_each<const N: usize>(
    linears: &mut Linears,
    each: [&Linear; N],
    x: Tensor<3>,
) -> [Tensor<3>; N] {
    if each.iter().all(|l| l.weight.val().dtype() == x.dtype()) {
        linears.forward_each(each, x)
    } else {
        each.map(|l| project(linears, l, x.clone()))
    }
}

/// The SwiGLU MLP: `down(silu(gate(x)) · up(x))`.
#[derive(Module, Debug)]
pub struct SwiGlu {
    /// D → intermediate (`gate_proj`).
    pub gate: Linear,
    /// D → intermediate (`up_proj`).
    pub up: Linear,
    /// intermediate → D (`down_proj`).
    pub down: Linear,
}

/// A pre-norm block: `x + attn(n1(x))`, then `x + mlp(n2(x))`.
#[derive(Module, Debug)]
pub struct LlamaBlock {
    /// RMSNorm before attention (`input_layernorm`).
    pub input_norm: RmsNorm,
    /// Rotary grouped-query causal attention.
    pub attention: GroupedQueryAttention,
    /// RMSNorm before the MLP (`post_attention_layernorm`).
    pub post_norm: RmsNorm,
    /// The SwiGLU MLP.
    pub mlp: SwiGlu,
}

/// The final RMSNorm and the projection to the vocabulary.
///
/// `unembed` is a burn [`Linear`] without bias, `[hidden, vocab]` (burn's layout, the transpose
/// of `lm_head.weight`); tied, it is the token embedding's transpose and the engine sums both
/// gradients ([`LlamaConfig::tie_embeddings`]).
#[derive(Module, Debug)]
pub struct LlamaHead {
    /// The final RMSNorm (`model.norm`).
    pub norm: RmsNorm,
    /// hidden → vocab, no bias (`lm_head`).
    pub unembed: Linear,
}

/// One layer of a [`LlamaConfig`] model. The embedding takes rank-2 int token ids `[N, T]`;
/// blocks take and return a bundle of `x` (float `[N, T, D]`) and `positions` (int `[N, T]`);
/// the head returns rank-3 float logits `[N, T, V]`.
#[derive(Module, Debug)]
// A model holds a handful of layers, once; boxing the block would only add an indirection.
#[allow(clippy::large_enum_variant)]
pub enum LlamaLayer {
    /// The token embedding.
    Embedding(TokenEmbedding),
    /// A transformer block.
    Block(LlamaBlock),
    /// Final RMSNorm + projection.
    Head(LlamaHead),
}

impl Layer for LlamaLayer {
    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
        self.forward_linears(input, &mut Linears::plain())
    }

    /// The blocks' projections and MLP, and the head's projection, run through `linears` (the
    /// engine splits their backward); the embedding is a lookup.
    fn forward_linears(
        &self,
        input: Activation,
        linears: &mut Linears,
    ) -> Result<Activation, EngineError> {
        Ok(match self {
            LlamaLayer::Embedding(e) => {
                let ids: Tensor<2, Int> = input.int()?;
                let [n, t] = ids.dims();
                let device = e.token.weight.device();
                let tokens = e.token.forward(ids.to_device(&device));
                let positions = Tensor::<1, Int>::arange(0..t as i64, &device)
                    .unsqueeze::<2>()
                    .expand([n, t]);
                Bundle::new()
                    .with("x", tokens)
                    .with("positions", positions)
                    .into()
            }
            LlamaLayer::Block(b) => {
                let input = input.bundle()?;
                let x: Tensor<3> = input.get("x")?.clone().float()?;
                let positions: Tensor<2, Int> = input.get("positions")?.clone().int()?;
                let attended =
                    b.attention
                        .forward_linears(rms(&b.input_norm, x.clone()), positions, linears);
                // The residual stream keeps its dtype (fp32 under bf16, as autocast's).
                let x = x.clone() + downcast_like(attended, &x);
                let normed = rms(&b.post_norm, x.clone());
                let [gate, up] = project_each(linears, [&b.mlp.gate, &b.mlp.up], normed);
                // SiLU in fp32, rounded once, as PyTorch's bf16 kernel.
                let gate = downcast_like(silu(upcast(gate.clone())), &gate);
                let down = project(linears, &b.mlp.down, gate * up);
                input.with("x", x.clone() + downcast_like(down, &x)).into()
            }
            LlamaLayer::Head(h) => {
                let x: Tensor<3> = input.bundle()?.take("x")?.float()?;
                project(linears, &h.unembed, rms(&h.norm, x)).into()
            }
        })
    }

    fn splits_linears(&self) -> bool {
        !matches!(self, LlamaLayer::Embedding(_))
    }

    /// As `torch.autocast`: the `Linear`s in `dtype`, the embedding and the RMSNorm weights
    /// fp32.
    fn compute_copy(&self, dtype: FloatDType) -> Self {
        let cast = |l: &Linear| cast_module(l, dtype);
        match self {
            LlamaLayer::Embedding(e) => LlamaLayer::Embedding(e.clone()),
            LlamaLayer::Block(b) => LlamaLayer::Block(LlamaBlock {
                input_norm: b.input_norm.clone(),
                attention: GroupedQueryAttention {
                    query: cast(&b.attention.query),
                    key: cast(&b.attention.key),
                    value: cast(&b.attention.value),
                    output: cast(&b.attention.output),
                    heads: b.attention.heads,
                    kv_heads: b.attention.kv_heads,
                    head_dim: b.attention.head_dim,
                    rope_theta: b.attention.rope_theta,
                },
                post_norm: b.post_norm.clone(),
                mlp: SwiGlu {
                    gate: cast(&b.mlp.gate),
                    up: cast(&b.mlp.up),
                    down: cast(&b.mlp.down),
                },
            }),
            LlamaLayer::Head(h) => LlamaLayer::Head(LlamaHead {
                norm: h.norm.clone(),
                unembed: cast(&h.unembed),
            }),
        }
    }

    /// The hidden state is the residual stream: fp32 under bf16, across stages too.
    fn keeps_input_dtype(&self) -> bool {
        true
    }

    /// What each op of a block and of the head keeps ([`saved`]; the residual stream, the
    /// RMSNorms, the rotary embedding, the SiLU and the softmax in fp32, the `Linear`s' inputs
    /// and outputs and the attention products' operands at the compute width `c`, the
    /// `Linear`s' weights' width: 4 in fp32, 2 under bf16):
    /// - a block: its input, which the first RMSNorm's division saves (so it stays live, and
    ///   the previous layer counted it); each RMSNorm's normalized values and its output as
    ///   the `Linear`s take it (one tensor shared by q, k and v, and by gate and up, in fp32;
    ///   under bf16 each call's own cast copy at `c`); the queries and the keys rotated, the
    ///   keys and the values repeated to every query head (a copy where key/value heads are
    ///   fewer), the heads' output reshaped (each a query's size at `c`); the rotary's `cos`
    ///   and `sin`; the scores (the shifted and exponentiated values in fp32, the weights at
    ///   `c`) and the causal mask; the two residual sums (the first, which the second RMSNorm
    ///   saves, and the block's output); the SwiGLU's gate in fp32 and its sigmoid, the SiLU's
    ///   output, the up projection and the product at `c`. The split `Linear`s without a bias
    ///   keep a zeros leaf of their output's size;
    /// - the head: its RMSNorm's normalized values (it keeps its input too), its output as the
    ///   projection takes it, and the logits (and the split projection's zeros leaf);
    /// - the embedding: its output (the lookup saves the ids).
    fn graph_bytes(&self, input: &Activation, output: &Activation, split: bool) -> u64 {
        let Some((elements, s)) = crate::gpt::residual_stream(input) else {
            return output.held_bytes();
        };
        let leaf = |l: &Linear, output_elements: usize| match split {
            true => saved::split_leaf(output_elements, l.bias.is_some()),
            false => 0,
        };
        // The norm's output as `calls` `Linear`s take it: one shared tensor where no cast is
        // made, else each call's own copy.
        let normed = |c: usize, calls: usize| match c == s {
            true => saved::values(elements, c),
            false => saved::values(calls * elements, c),
        };
        match self {
            LlamaLayer::Embedding(_) => output.held_bytes(),
            LlamaLayer::Block(b) => {
                let a = &b.attention;
                let c = a.query.weight.val().dtype().size();
                let dims = input.dims();
                let (n, t) = (dims[0], dims.get(1).copied().unwrap_or(1));
                let width = |l: &Linear| l.weight.dims()[1];
                let rows = n * t;
                let (q, kv) = (rows * width(&a.query), rows * width(&a.key));
                let hidden = rows * width(&b.mlp.gate);
                let scores = n * a.heads * t * t;
                let attention = saved::values(4 * q, c)
                    + saved::rotary(rows * a.head_dim)
                    + saved::softmax(scores, 4)
                    + saved::values(scores, c)
                    + saved::mask(n * t * t);
                let mlp = saved::values(hidden, 4)
                    + saved::silu(hidden, 4)
                    + saved::values(3 * hidden, c);
                let leaves = leaf(&a.query, q)
                    + leaf(&a.key, kv)
                    + leaf(&a.value, kv)
                    + leaf(&a.output, elements)
                    + leaf(&b.mlp.gate, hidden)
                    + leaf(&b.mlp.up, hidden)
                    + leaf(&b.mlp.down, elements);
                2 * saved::rms_norm(elements, 4)
                    + normed(c, 3)
                    + normed(c, 2)
                    + attention
                    + saved::values(2 * elements, s)
                    + mlp
                    + leaves
            }
            LlamaLayer::Head(h) => {
                let c = h.unembed.weight.val().dtype().size();
                saved::rms_norm(elements, 4)
                    + normed(c, 1)
                    + output.held_bytes()
                    + leaf(&h.unembed, output.elements())
            }
        }
    }
}

/// `norm(x)` in fp32 — input and weight cast up, the result cast back to `x`'s dtype — as
/// transformers' `LlamaRMSNorm` computes in fp32. Under fp32 the norm's own forward.
fn rms(norm: &RmsNorm, x: Tensor<3>) -> Tensor<3> {
    downcast_like(upcast_module(norm).forward(upcast(x.clone())), &x)
}
