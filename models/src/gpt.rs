//! GPT-like decoder: token + position embedding, `layers` pre-norm transformer blocks with
//! causal self-attention, and a LayerNorm + Linear head to next-token logits.
//!
//! ```text
//!   [N, T] token ids (int)
//!   Embedding  wte[ids] + wpe[0..T]               bundle {x: [N, T, D], positions: [N, T] int}
//!   Block      x += attn(ln1(x))   (causal by `positions`, `heads` heads of D/heads; no key bias)
//!              x += mlp(ln2(x))    (Linear D→4D, GELU, Linear 4D→D)    (× layers)
//!   Head       ln_f(x) → Linear D→V (no bias)                          [N, T, V] logits
//! ```
//!
//! Between layers (and so across stage boundaries) the hidden state travels with its position
//! ids as a [`Bundle`]: `x` differentiable, `positions` a non-differentiable int tensor. Each
//! block's attention mask comes from the positions (key position > query position is masked),
//! so nothing but the ids decides what a token sees.
//!
//! Every item is one [`GptLayer`], so the partitioner can cut between any two. There is no
//! dropout anywhere: a pipelined step then equals a single-device step up to rounding. Pair it
//! with [`CrossEntropy`](pipetrain_engine::CrossEntropy), which takes rank-3 logits and rank-2
//! next-token ids and averages over all tokens.

use burn::nn::{
    Embedding, EmbeddingConfig, Initializer, LayerNorm, LayerNormConfig, Linear, LinearConfig,
};
use burn::prelude::*;
use burn::tensor::Bool;
use burn::tensor::activation::{gelu, softmax};
use pipetrain_engine::{
    Activation, Bundle, EngineError, Layer, Linears, downcast_like, matmul, saved, upcast,
    upcast_module,
};

/// The shape of a GPT-like decoder.
///
/// ```
/// use burn::prelude::*;
/// use burn::tensor::Int;
/// use pipetrain_engine::Layer;
/// use pipetrain_models::GptConfig;
/// let device = Device::flex();
/// let layers = GptConfig::new(16, 8, 16, 2, 2).init(&device);
/// assert_eq!(layers.len(), 4); // embedding + 2 blocks + head
/// let mut x = Tensor::<2, Int>::zeros([3, 8], &device).into();
/// for layer in &layers {
///     x = layer.forward(x).unwrap();
/// }
/// assert_eq!(x.dims(), vec![3, 8, 16]);
/// ```
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GptConfig {
    /// Vocabulary size: token ids are in `0..vocab`, logits have `vocab` entries.
    pub vocab: usize,
    /// Maximum sequence length (rows of the position embedding).
    pub context: usize,
    /// Model width D.
    pub d_model: usize,
    /// Attention heads; must divide `d_model`.
    pub heads: usize,
    /// Transformer blocks.
    pub layers: usize,
    /// Hidden width of each block's MLP as a multiple of `d_model` (GPT: 4).
    pub mlp_ratio: usize,
    /// Standard deviation of the normal init of both embeddings (GPT-2: 0.02).
    pub embedding_std: f64,
}

impl GptConfig {
    /// A decoder with MLP ratio 4 and embeddings initialized `N(0, 0.02²)`.
    pub fn new(vocab: usize, context: usize, d_model: usize, heads: usize, layers: usize) -> Self {
        Self {
            vocab,
            context,
            d_model,
            heads,
            layers,
            mlp_ratio: 4,
            embedding_std: 0.02,
        }
    }

    /// The tie between the token embedding (`0.token.weight`, `[vocab, d_model]`) and the head's
    /// output projection (`{layers + 1}.unembed.weight`, `[d_model, vocab]`): GPT-2's weight
    /// tying. Give it to `Pipeline::builder().tie(..)`; the two sit on the first and the last
    /// stage, and their gradients are summed between them every step.
    ///
    /// ```
    /// let tie = pipetrain_models::GptConfig::new(16, 8, 16, 2, 2).tie_embeddings();
    /// assert_eq!(tie.to_string(), "0.token.weight = 3.unembed.weight^T");
    /// ```
    pub fn tie_embeddings(&self) -> pipetrain_engine::Tie {
        pipetrain_engine::Tie::transposed(
            "0.token.weight",
            format!("{}.unembed.weight", self.layers + 1),
        )
    }

    /// The layer sequence: embedding, blocks `0..layers`, head.
    ///
    /// # Panics
    /// If `heads` is zero or does not divide `d_model`.
    pub fn init(&self, device: &Device) -> Vec<GptLayer> {
        assert!(
            self.heads > 0 && self.d_model % self.heads == 0,
            "GptConfig: heads ({}) must divide d_model ({})",
            self.heads,
            self.d_model
        );
        let d = self.d_model;
        let normal = Initializer::Normal {
            mean: 0.0,
            std: self.embedding_std,
        };
        let mut layers = vec![GptLayer::Embedding(Embeddings {
            token: EmbeddingConfig::new(self.vocab, d)
                .with_initializer(normal.clone())
                .init(device),
            position: EmbeddingConfig::new(self.context, d)
                .with_initializer(normal)
                .init(device),
        })];
        for _ in 0..self.layers {
            layers.push(GptLayer::Block(Block {
                norm1: LayerNormConfig::new(d).init(device),
                attention: CausalSelfAttention {
                    query: LinearConfig::new(d, d).init(device),
                    key: LinearConfig::new(d, d).with_bias(false).init(device),
                    value: LinearConfig::new(d, d).init(device),
                    output: LinearConfig::new(d, d).init(device),
                    heads: self.heads,
                },
                norm2: LayerNormConfig::new(d).init(device),
                mlp: FeedForward {
                    up: LinearConfig::new(d, self.mlp_ratio * d).init(device),
                    down: LinearConfig::new(self.mlp_ratio * d, d).init(device),
                },
            }));
        }
        layers.push(GptLayer::Head(Head {
            norm: LayerNormConfig::new(d).init(device),
            unembed: LinearConfig::new(d, self.vocab)
                .with_bias(false)
                .init(device),
        }));
        layers
    }
}

/// Token embedding plus learned position embedding.
#[derive(Module, Debug)]
pub struct Embeddings {
    /// `[vocab, d_model]`: row `i` is token `i`'s vector.
    pub token: Embedding,
    /// `[context, d_model]`: row `t` is added at position `t`.
    pub position: Embedding,
}

/// Multi-head self-attention in which position `t` attends only to positions `0..=t`.
#[derive(Module, Debug)]
pub struct CausalSelfAttention {
    /// D → D query projection.
    pub query: Linear,
    /// D → D key projection, without bias: a key bias adds `q·b` to every score of a query,
    /// which softmax ignores, so its gradient is 0 up to rounding; Adam at ε = 1e-8 would turn
    /// that rounding noise into lr-sized steps that differ between any two summation orders
    /// (LLaMA-style models drop it too).
    pub key: Linear,
    /// D → D value projection.
    pub value: Linear,
    /// D → D output projection.
    pub output: Linear,
    /// Number of heads (a constant, not a parameter).
    pub heads: usize,
}

impl CausalSelfAttention {
    /// `[N, T, D] → [N, T, D]`; position `t` attends to `0..=t`.
    pub fn forward(&self, x: Tensor<3>) -> Tensor<3> {
        let [n, t, _] = x.dims();
        let positions = Tensor::<1, Int>::arange(0..t as i64, &x.device())
            .unsqueeze::<2>()
            .expand([n, t]);
        self.forward_at(x, positions)
    }

    /// `[N, T, D] → [N, T, D]`: token `i` attends to the tokens whose position (`[N, T]` ids)
    /// is at most its own.
    pub fn forward_at(&self, x: Tensor<3>, positions: Tensor<2, Int>) -> Tensor<3> {
        self.forward_linears(x, positions, &mut Linears::plain())
    }

    /// [`forward_at`](Self::forward_at) with the projections called through `linears` (the
    /// engine splits their backward).
    pub fn forward_linears(
        &self,
        x: Tensor<3>,
        positions: Tensor<2, Int>,
        linears: &mut Linears,
    ) -> Tensor<3> {
        let [n, t, d] = x.dims();
        let (h, dh) = (self.heads, d / self.heads);
        // [N, T, D] → [N, H, T, Dh]
        let split = |y: Tensor<3>| y.reshape([n, t, h, dh]).swap_dims(1, 2);
        let [q, k, v] = linears
            .forward_each([&self.query, &self.key, &self.value], x)
            .map(split);
        let scores = matmul(q, k.swap_dims(2, 3)).mul_scalar(1.0 / (dh as f64).sqrt());
        // true where the key's position > the query's: masked out.
        let positions = positions.to_device(&scores.device());
        let query = positions.clone().reshape([n, t, 1]).expand([n, t, t]);
        let key = positions.reshape([n, 1, t]).expand([n, t, t]);
        let future: Tensor<4, Bool> = key
            .greater(query)
            .reshape([n, 1, t, t])
            .expand([n, h, t, t]);
        // A large finite negative rather than -inf: exp underflows to exactly 0 either way,
        // and no inf ever enters a backward.
        // In fp32 under bf16, as autocast runs softmax on a GPU.
        let scores = scores.mask_fill(future, -1e9);
        let weights = downcast_like(softmax(upcast(scores.clone()), 3), &scores);
        let y = matmul(weights, v).swap_dims(1, 2).reshape([n, t, d]);
        linears.forward(&self.output, y)
    }
}

/// The position-wise MLP of a block: Linear → GELU → Linear.
#[derive(Module, Debug)]
pub struct FeedForward {
    /// D → ratio·D.
    pub up: Linear,
    /// ratio·D → D.
    pub down: Linear,
}

/// A pre-norm transformer block: `x + attn(ln1(x))`, then `x + mlp(ln2(x))`.
#[derive(Module, Debug)]
pub struct Block {
    /// LayerNorm before attention.
    pub norm1: LayerNorm,
    /// Causal self-attention.
    pub attention: CausalSelfAttention,
    /// LayerNorm before the MLP.
    pub norm2: LayerNorm,
    /// The MLP.
    pub mlp: FeedForward,
}

/// The final LayerNorm and the unembedding.
///
/// ## Weight layout
///
/// `unembed` is a burn [`Linear`] without bias, `logits = x · W` with `W = unembed.weight` of
/// shape `[d_model, vocab]` (burn's row layout) — the *transpose* of the token embedding
/// `Embeddings::token.weight`, `[vocab, d_model]`. Tying the two (GPT-2) means
/// `W = wteᵀ` and summing both gradients; that spans the first and last stage and is left to
/// the engine.
#[derive(Module, Debug)]
pub struct Head {
    /// The final LayerNorm.
    pub norm: LayerNorm,
    /// D → vocab, no bias.
    pub unembed: Linear,
}

/// One layer of a [`GptConfig`] model. The embedding takes rank-2 int token ids `[N, T]`; blocks
/// take and return a bundle of `x` (float `[N, T, D]`) and `positions` (int `[N, T]`, no
/// gradient); the head takes that bundle and returns rank-3 float logits `[N, T, V]`.
#[derive(Module, Debug)]
// A model holds a handful of layers, once; boxing the block would only add an indirection.
#[allow(clippy::large_enum_variant)]
pub enum GptLayer {
    /// Token + position embedding.
    Embedding(Embeddings),
    /// A transformer block.
    Block(Block),
    /// Final LayerNorm + unembedding.
    Head(Head),
}

impl Layer for GptLayer {
    fn forward(&self, input: Activation) -> Result<Activation, EngineError> {
        self.forward_linears(input, &mut Linears::plain())
    }

    /// The blocks' projections and MLP, and the head's unembedding, run through `linears` (the
    /// engine splits their backward); the embedding is a lookup.
    fn forward_linears(
        &self,
        input: Activation,
        linears: &mut Linears,
    ) -> Result<Activation, EngineError> {
        Ok(match self {
            GptLayer::Embedding(e) => {
                let ids: Tensor<2, Int> = input.int()?;
                let [_, t] = ids.dims();
                let context = e.position.weight.dims()[0];
                if t > context {
                    return Err(EngineError::LayerRejected(format!(
                        "sequence of {t} tokens is longer than the context of {context}; \
                         use sequences of at most {context} tokens or a larger context"
                    )));
                }
                let device = e.token.weight.device();
                // Token ids arrive plain (int tensors carry no gradient); look them up on the
                // weights' device.
                let tokens = e.token.forward(ids.to_device(&device));
                let positions = e.position.weight.val().narrow(0, 0, t).unsqueeze::<3>();
                let n = tokens.dims()[0];
                let ids = Tensor::<1, Int>::arange(0..t as i64, &device)
                    .unsqueeze::<2>()
                    .expand([n, t]);
                Bundle::new()
                    .with("x", tokens + positions)
                    .with("positions", ids)
                    .into()
            }
            GptLayer::Block(b) => {
                let input = input.bundle()?;
                let x: Tensor<3> = input.get("x")?.clone().float()?;
                let positions: Tensor<2, Int> = input.get("positions")?.clone().int()?;
                let attended =
                    b.attention
                        .forward_linears(norm(&b.norm1, x.clone()), positions, linears);
                let x = x + attended;
                let hidden = gelu(linears.forward(&b.mlp.up, norm(&b.norm2, x.clone())));
                input
                    .with("x", x + linears.forward(&b.mlp.down, hidden))
                    .into()
            }
            GptLayer::Head(h) => {
                let x: Tensor<3> = input.bundle()?.take("x")?.float()?;
                linears.forward(&h.unembed, norm(&h.norm, x)).into()
            }
        })
    }

    fn splits_linears(&self) -> bool {
        !matches!(self, GptLayer::Embedding(_))
    }

    /// What each op of a block and of the head keeps ([`saved`]; `w` the width of the
    /// residual stream's values, the norms and softmax in fp32 as the layer norms (`norm`) and the attention
    /// run them), less the input, which no op of a block or of the head saves (the norm's
    /// difference and the residual sum save nothing):
    /// - a block: each layer norm's centered and normalized values (fp32) and its output; `q`,
    ///   `k`, `v` (kept by the score and value products); the scores (the shifted and the
    ///   exponentiated values in fp32, the weights at `w`) and the causal mask; the heads'
    ///   output reshaped (kept by the output projection); the MLP's hidden layer before and
    ///   after the GELU; the block's output. The first residual sum is made in the attention
    ///   output's buffer (freeing the input), the second in the down projection's (freeing the
    ///   first): one stream a block. The split key projection, without a bias, keeps a zeros
    ///   leaf of its output's size;
    /// - the head: its norm's values and output, and its logits (and the split unembedding's
    ///   zeros leaf);
    /// - the embedding: its output (the lookup saves the ids, the position rows are a view).
    fn graph_bytes(&self, input: &Activation, output: &Activation, split: bool) -> u64 {
        let Some((elements, w)) = residual_stream(input) else {
            return output.held_bytes();
        };
        let norm = |elements| saved::layer_norm(elements, 4) + saved::values(elements, w);
        let leaf = |elements| match split {
            true => saved::split_leaf(elements, false),
            false => 0,
        };
        match self {
            GptLayer::Embedding(_) => output.held_bytes(),
            GptLayer::Block(b) => {
                let dims = input.dims();
                let (n, t) = (dims[0], dims.get(1).copied().unwrap_or(1));
                let scores = n * b.attention.heads * t * t;
                let hidden = elements * b.mlp.up.weight.dims()[1] / b.mlp.up.weight.dims()[0];
                let attention =
                    saved::softmax(scores, 4) + saved::values(scores, w) + saved::mask(n * t * t);
                // Two norms; q, k, v and the heads' output; the hidden layer twice; the
                // stream (the block's output, less its input).
                2 * norm(elements)
                    + saved::values(4 * elements, w)
                    + attention
                    + saved::values(2 * hidden, w)
                    + leaf(elements)
            }
            GptLayer::Head(_) => {
                let logits = output.elements();
                // The norm's output, kept by the unembedding, less the input.
                norm(elements) - saved::values(elements, w) + output.held_bytes() + leaf(logits)
            }
        }
    }
}

/// The residual stream a transformer layer takes, as its graph rules count it: the elements and
/// the width in bytes of one value of `input`'s `x` part (a bundle's) or of `input` itself;
/// `None` where there is none to count (no `x` part, or no elements). The Llama's too.
pub(crate) fn residual_stream(input: &Activation) -> Option<(usize, usize)> {
    let x = match input {
        Activation::Bundle(b) => b.get("x").ok()?,
        other => other,
    };
    let elements = x.elements();
    (elements > 0).then(|| (elements, x.value_bytes() / elements))
}

/// `norm(x)` in fp32 — its input and its weights cast up, the result cast back to `x`'s dtype —
/// as autocast runs layer norm on a GPU. Under fp32 the norm's own forward, unchanged.
fn norm(norm: &LayerNorm, x: Tensor<3>) -> Tensor<3> {
    downcast_like(upcast_module(norm).forward(upcast(x.clone())), &x)
}
