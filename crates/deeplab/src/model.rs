//! DeepLabV3+ (Chen et al., 2018) as burn modules, laid out like torchvision: a ResNet backbone with
//! `replace_stride_with_dilation`, ASPP, optional self-attention and FCN auxiliary head, and the
//! encoder-decoder head. Modules swapped for identity are `None`; the forward pass reports every
//! stage to an observer and stops after the truncation stage.

use crate::arch::ids::{self, block};
use crate::arch::Architecture;
use crate::blocks::{bn, conv, run_conv, Block, Conv3x3, ConvBnRelu, Norm, NormKind};
use crate::checkpoint::Segments;
use crate::config::{AttentionKernel, MemoryModel};
use crate::pytorch::{as_dtype, dropout, PytorchOps};
use crate::resize::resize;
use burn::nn::attention::{MhaInput, MultiHeadAttention, MultiHeadAttentionConfig};
use burn::nn::conv::{Conv2d, Conv2dConfig};
use burn::nn::pool::{MaxPool2d, MaxPool2dConfig};
use burn::nn::{Dropout, DropoutConfig, PaddingConfig2d};
use burn::prelude::*;
use burn::tensor::module::adaptive_avg_pool2d;

#[derive(Module, Debug)]
pub struct ResNet<B: Backend> {
    pub conv1: Conv2d<B>,
    pub bn1: Norm<B>,
    pub maxpool: MaxPool2d,
    /// `layer1` … `layer4`; a block swapped for identity is `None`.
    pub layers: Vec<Vec<Option<Block<B>>>>,
}

impl<B: PytorchOps> ResNet<B> {
    fn new(arch: &Architecture, device: &B::Device) -> Self {
        let bottleneck = arch.config.backbone.bottleneck();
        let layers = arch
            .blocks
            .iter()
            .enumerate()
            .map(|(i, specs)| {
                let present = |k: usize| !arch.is_identity(&block(i, k));
                let build = |(k, s): (usize, &crate::blocks::BlockSpec)| {
                    present(k).then(|| Block::new(*s, bottleneck, device))
                };
                specs.iter().enumerate().map(build).collect()
            })
            .collect();
        ResNet {
            conv1: Conv2dConfig::new([3, 64], [7, 7])
                .with_stride([2, 2])
                .with_padding(PaddingConfig2d::Explicit(3, 3, 3, 3))
                .with_bias(false)
                .init(device),
            bn1: bn(64, device),
            maxpool: MaxPool2dConfig::new([3, 3])
                .with_strides([2, 2])
                .with_padding(PaddingConfig2d::Explicit(1, 1, 1, 1))
                .init(),
            layers,
        }
    }
}

#[derive(Module, Debug)]
pub struct Aspp<B: Backend> {
    pub branch0: Option<ConvBnRelu<B>>,
    /// The three atrous branches `branch1` … `branch3`.
    pub atrous: Vec<Option<Conv3x3<B>>>,
    pub pool: Option<ConvBnRelu<B>>,
    pub project: ConvBnRelu<B>,
    pub dropout: Dropout,
    #[module(skip)]
    pub memory: MemoryModel,
}

impl<B: PytorchOps> Aspp<B> {
    fn new(arch: &Architecture, device: &B::Device) -> Self {
        let m = &arch.config;
        let on = |id: &str| !arch.is_identity(id);
        let high = arch.blocks[3][0].planes * m.backbone.expansion();
        let c = m.aspp_channels;
        let rates = m.effective_aspp_rates();
        let [branch0, atrous @ ..] = ids::ASPP_BRANCHES;
        let kept = ids::ASPP_BRANCHES
            .iter()
            .chain([&ids::ASPP_POOL])
            .filter(|id| on(id))
            .count();
        let pointwise = || ConvBnRelu::new(conv([high, c], 1, 1, 1, 1), device);
        Aspp {
            branch0: on(branch0).then(pointwise),
            atrous: (0..3)
                .map(|i| {
                    on(atrous[i]).then(|| Conv3x3::new([high, c], rates[i], m.separable, device))
                })
                .collect(),
            pool: on(ids::ASPP_POOL).then(pointwise),
            project: ConvBnRelu::new(conv([kept * c, c], 1, 1, 1, 1), device),
            dropout: DropoutConfig::new(0.5).init(),
            memory: arch.memory_model,
        }
    }

    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let [_, _, h, w] = x.dims();
        let mut outs = Vec::with_capacity(5);
        if let Some(b) = &self.branch0 {
            outs.push(b.forward(x.clone()));
        }
        for b in self.atrous.iter().flatten() {
            outs.push(b.forward(x.clone()));
        }
        if let Some(p) = &self.pool {
            // Image pooling: global average, 1×1 conv + BN + ReLU, broadcast back bilinearly.
            let pooled = p.forward(adaptive_avg_pool2d(x, [1, 1]));
            outs.push(resize(pooled, [h, w]));
        }
        let cat = Tensor::cat(outs, 1);
        dropout(&self.dropout, self.project.forward(cat), self.memory)
    }
}

/// Multi-head self-attention over the ASPP output's pixels, with a residual connection.
#[derive(Module, Debug)]
pub struct Attention<B: Backend> {
    pub mha: MultiHeadAttention<B>,
    #[module(skip)]
    pub kernel: AttentionKernel,
}

impl<B: PytorchOps> Attention<B> {
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        let [b, c, h, w] = x.dims();
        // [B, C, H, W] -> [B, H·W, C]: every pixel is a token.
        let tokens = x.reshape([b, c, h * w]).swap_dims(1, 2);
        // burn's attention module wants its weights' precision: under autocast it runs in f32
        // (PyTorch's autocast would run its projections in the low precision, softmax in f32).
        let (low, weights) = (tokens.dtype(), self.mha.query.weight.val().dtype());
        let input = as_dtype(tokens.clone(), weights);
        let attended = match self.kernel {
            AttentionKernel::Math => self.mha.forward(MhaInput::self_attn(input)).context,
            AttentionKernel::Efficient => self.efficient(input),
        };
        let attended = as_dtype(attended, low);
        (tokens + attended).swap_dims(1, 2).reshape([b, c, h, w])
    }

    /// burn's module's projections around the memory-efficient kernel ([`crate::attention`]).
    fn efficient(&self, x: Tensor<B, 3>) -> Tensor<B, 3> {
        let mha = &self.mha;
        let [b, n, d] = x.dims();
        let heads = |l: &burn::nn::Linear<B>| {
            l.forward(x.clone())
                .reshape([b, n, mha.n_heads, mha.d_k])
                .swap_dims(1, 2)
        };
        let (q, k, v) = (heads(&mha.query), heads(&mha.key), heads(&mha.value));
        let scale = 1.0 / (mha.d_k as f64).sqrt();
        let context = crate::attention::efficient(q, k, v, scale);
        mha.output
            .forward(context.swap_dims(1, 2).reshape([b, n, d]))
    }
}

#[derive(Module, Debug)]
pub struct Decoder<B: Backend> {
    /// The 48-channel 1×1 projection of layer1.
    pub project: Option<ConvBnRelu<B>>,
    /// The two 3×3 256-channel convolutions after concatenation.
    pub fuse: Vec<Option<Conv3x3<B>>>,
}

impl<B: PytorchOps> Decoder<B> {
    fn new(arch: &Architecture, device: &B::Device) -> Self {
        let m = &arch.config;
        let on = |id: &str| !arch.is_identity(id);
        let low_in = arch.blocks[0][0].planes * m.backbone.expansion();
        let mut ch = arch.aspp_out + arch.low_level;
        let fuse = ids::DECODER_FUSE
            .iter()
            .map(|id| {
                on(id).then(|| {
                    let f = Conv3x3::new([ch, 256], 1, m.separable, device);
                    ch = 256;
                    f
                })
            })
            .collect();
        Decoder {
            project: on(ids::DECODER_PROJECT)
                .then(|| ConvBnRelu::new(conv([low_in, 48], 1, 1, 1, 1), device)),
            fuse,
        }
    }

    pub fn forward(&self, high: Tensor<B, 4>, low: Tensor<B, 4>) -> Tensor<B, 4> {
        let [_, _, h, w] = low.dims();
        let low = match &self.project {
            Some(p) => p.forward(low),
            None => low,
        };
        let mut x = Tensor::cat(vec![resize(high, [h, w]), low], 1);
        for f in self.fuse.iter().flatten() {
            x = f.forward(x);
        }
        x
    }
}

/// torchvision's `FCNHead` on layer3: 3×3 conv to in/4 channels + BN + ReLU, dropout 0.1, 1×1 conv.
#[derive(Module, Debug)]
pub struct AuxHead<B: Backend> {
    pub conv: ConvBnRelu<B>,
    pub dropout: Dropout,
    pub classifier: Conv2d<B>,
    #[module(skip)]
    pub memory: MemoryModel,
}

impl<B: PytorchOps> AuxHead<B> {
    pub fn forward(&self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        run_conv(
            &self.classifier,
            dropout(&self.dropout, self.conv.forward(x), self.memory),
        )
    }
}

/// What the forward pass produced.
#[derive(Debug)]
pub enum Head<B: Backend> {
    /// Class logits `[B, classes, h, w]`, at the loss resolution.
    Logits(Tensor<B, 4>),
    /// The output of the truncation stage.
    Truncated(Tensor<B, 4>),
}

#[derive(Debug)]
pub struct Output<B: Backend> {
    pub head: Head<B>,
    /// Auxiliary logits at the same resolution as the main logits, when the aux head ran.
    pub aux: Option<Tensor<B, 4>>,
    /// What backward needs to recompute the checkpointed blocks, when every block is one.
    pub segments: Option<Segments<B>>,
}

#[derive(Module, Debug)]
pub struct DeepLabV3Plus<B: Backend> {
    pub backbone: ResNet<B>,
    pub aspp: Option<Aspp<B>>,
    pub attention: Option<Attention<B>>,
    pub aux_head: Option<AuxHead<B>>,
    pub decoder: Option<Decoder<B>>,
    pub classifier: Conv2d<B>,
    #[module(skip)]
    pub arch: Architecture,
}

impl<B: PytorchOps> DeepLabV3Plus<B> {
    /// Builds the whole model (every parameter, also past the truncation point, as in real training).
    pub fn new(arch: Architecture, device: &B::Device) -> Self {
        let kind = NormKind::of(arch.config.batch_norm, arch.memory_model);
        crate::blocks::building_with(kind, || Self::build(arch, device))
    }

    fn build(arch: Architecture, device: &B::Device) -> Self {
        let m = &arch.config;
        let on = |id: &str| !arch.is_identity(id);
        let attention = (m.attention_heads > 0 && on(ids::ATTENTION)).then(|| Attention {
            mha: MultiHeadAttentionConfig::new(arch.aspp_out, m.attention_heads)
                .with_dropout(0.0)
                .init(device),
            kernel: m.attention_kernel,
        });
        let aux_head = (m.aux_head && on(ids::AUX_HEAD)).then(|| {
            let inter = arch.layer3_out / 4;
            AuxHead {
                conv: ConvBnRelu::new(conv([arch.layer3_out, inter], 3, 1, 1, 1), device),
                dropout: DropoutConfig::new(0.1).init(),
                classifier: Conv2dConfig::new([inter, m.classes], [1, 1]).init(device),
                memory: arch.memory_model,
            }
        });
        DeepLabV3Plus {
            backbone: ResNet::new(&arch, device),
            aspp: (!arch.aspp_is_identity()).then(|| Aspp::new(&arch, device)),
            attention,
            aux_head,
            decoder: on(ids::DECODER).then(|| Decoder::new(&arch, device)),
            classifier: Conv2dConfig::new([arch.decoder_out, m.classes], [1, 1]).init(device),
            arch,
        }
    }

    /// Makes every parameter exist now: burn initialises them lazily, at first use, and a copy of
    /// a module made before that (a checkpointed block's detached copy) would draw its own values.
    pub fn materialize(&self) {
        struct Touch;
        impl<B: Backend> burn::module::ModuleVisitor<B> for Touch {
            fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<B, D>>) {
                let _ = param.val();
            }
        }
        self.visit(&mut Touch);
    }

    /// Visits the modules a training step runs, and so trains. Past a truncation point the
    /// parameters get no gradient, and a real step gives them no optimizer state.
    pub fn visit_trained<V: burn::module::ModuleVisitor<B>>(&self, v: &mut V) {
        let a = &self.arch;
        let runs = |id: &str| a.runs(a.stage_index(id));
        let bb = &self.backbone;
        bb.conv1.visit(v);
        bb.bn1.visit(v);
        for (i, layer) in bb.layers.iter().enumerate() {
            for (k, block) in layer.iter().enumerate() {
                match block {
                    Some(b) if runs(&ids::block(i, k)) => b.visit(v),
                    _ => {}
                }
            }
        }
        let head = self.aux_head.as_ref().filter(|_| a.aux_runs());
        let aspp = self.aspp.as_ref().filter(|_| runs(ids::ASPP));
        let attention = (self.attention.as_ref())
            .filter(|_| a.config.attention_heads > 0 && runs(ids::ATTENTION));
        let decoder = self.decoder.as_ref().filter(|_| runs(ids::DECODER));
        head.inspect(|m| m.visit(v));
        aspp.inspect(|m| m.visit(v));
        attention.inspect(|m| m.visit(v));
        decoder.inspect(|m| m.visit(v));
        if runs(ids::CLASSIFIER) {
            self.classifier.visit(v);
        }
    }

    /// The forward pass. `observe` is called with each stage id once its output exists (and with
    /// `aux_head` after the auxiliary head), so that a caller can read memory there.
    pub fn forward(&self, x: Tensor<B, 4>, observe: &mut dyn FnMut(&str)) -> Output<B> {
        let mut pass = Pass {
            arch: &self.arch,
            stage: 0,
            observe,
            segments: self.arch.checkpoint_blocks.then(Segments::new),
            aux: None,
        };
        let (head, aux_size) = self.stages(x, &mut pass);
        Output {
            head,
            aux: pass.aux.map(|a| resize(a, aux_size)),
            segments: pass.segments,
        }
    }

    /// Every stage up to the truncation point: the head's output and the size the auxiliary logits
    /// are brought to.
    fn stages(&self, x: Tensor<B, 4>, pass: &mut Pass<'_, B>) -> (Head<B>, [usize; 2]) {
        let [_, _, h, w] = x.dims();
        // Stem: [B, 3, H, W] -> [B, 64, H/4, W/4]
        let bb = &self.backbone;
        let x = bb
            .maxpool
            .forward(bb.bn1.relu(bb.bn1.forward(run_conv(&bb.conv1, x))));
        if pass.done(ids::STEM) {
            return (Head::Truncated(x), [h, w]);
        }
        let [mut x, low] = match self.layers(x, pass) {
            Ok(outputs) => outputs,
            Err(truncated) => return (Head::Truncated(truncated), [h, w]),
        };
        // x: [B, 512·e, H/OS, W/OS]
        if let Some(aspp) = &self.aspp {
            x = aspp.forward(x);
        }
        if pass.done(ids::ASPP) {
            return (Head::Truncated(x), [h, w]);
        }
        if self.arch.config.attention_heads > 0 {
            if let Some(att) = &self.attention {
                x = att.forward(x);
            }
            if pass.done(ids::ATTENTION) {
                return (Head::Truncated(x), [h, w]);
            }
        }
        // Decoder: [B, C, H/OS, W/OS] + layer1 [B, 64·e, H/4, W/4] -> [B, 256, H/4, W/4]
        if let Some(decoder) = &self.decoder {
            x = decoder.forward(x, low);
        }
        let [_, _, lh, lw] = self.arch.stages.last().expect("classifier stage").shape;
        if pass.done(ids::DECODER) {
            return (Head::Truncated(x), [lh, lw]);
        }
        // Classifier: 1×1 conv to classes, then bilinear to the loss resolution.
        let logits = resize(run_conv(&self.classifier, x), [lh, lw]);
        pass.done(ids::CLASSIFIER);
        (Head::Logits(logits), [lh, lw])
    }

    /// layer1 … layer4 (and the auxiliary head on layer3): the backbone's output and layer1's (for
    /// the decoder), or the output of the truncation stage.
    fn layers(
        &self,
        mut x: Tensor<B, 4>,
        pass: &mut Pass<'_, B>,
    ) -> Result<[Tensor<B, 4>; 2], Tensor<B, 4>> {
        let mut low = None;
        for (i, layer) in self.backbone.layers.iter().enumerate() {
            for (k, block) in layer.iter().enumerate() {
                if let Some(block) = block {
                    x = pass.block([i, k], block, x);
                }
                let last = k + 1 == layer.len();
                if i == 2 && last && self.arch.aux_runs() {
                    if let Some(head) = &self.aux_head {
                        pass.aux = Some(head.forward(pass.tap(x.clone())));
                    }
                }
                if pass.done(&ids::block(i, k)) {
                    return Err(pass.tap(x));
                }
                if pass.aux.is_some() && i == 2 && last {
                    (pass.observe)(ids::AUX_HEAD);
                }
                if i == 0 && last {
                    low = Some(pass.tap(x.clone()));
                }
            }
        }
        Ok([pass.tap(x), low.expect("layer1 ran")])
    }
}

/// A forward pass in progress: the next stage, the observer, the chain of checkpointed blocks
/// (when every block is a checkpoint segment) and the auxiliary head's output.
struct Pass<'a, B: Backend> {
    arch: &'a Architecture,
    stage: usize,
    observe: &'a mut dyn FnMut(&str),
    segments: Option<Segments<B>>,
    aux: Option<Tensor<B, 4>>,
}

impl<B: PytorchOps> Pass<'_, B> {
    /// Marks the end of stage `id`; true when the forward pass stops here.
    fn done(&mut self, id: &str) -> bool {
        debug_assert_eq!(self.arch.stages[self.stage].id, id);
        (self.observe)(id);
        let stop = self.arch.truncate == Some(self.stage);
        self.stage += 1;
        stop
    }

    /// A residual block, checkpointed or not.
    fn block(&mut self, at: [usize; 2], block: &Block<B>, x: Tensor<B, 4>) -> Tensor<B, 4> {
        match &mut self.segments {
            Some(s) => s.run(at, block, x),
            None => block.forward(x),
        }
    }

    /// `x` from the backbone's blocks into the rest of the model (see [`Segments::tap`]).
    fn tap(&mut self, x: Tensor<B, 4>) -> Tensor<B, 4> {
        match &mut self.segments {
            Some(s) => s.tap(x),
            None => x,
        }
    }
}

/// Counts trainable parameters, as torch's `sum(p.numel() for p in m.parameters() if p.requires_grad)`.
/// burn's `num_params` also counts BatchNorm's running statistics, which torch keeps as buffers.
pub fn trainable_params<B: burn::tensor::backend::AutodiffBackend, M: Module<B>>(m: &M) -> usize {
    struct Count(usize);
    impl<B: Backend> burn::module::ModuleVisitor<B> for Count {
        fn visit_float<const D: usize>(&mut self, param: &burn::module::Param<Tensor<B, D>>) {
            if param.is_require_grad() {
                self.0 += param.shape().num_elements();
            }
        }
    }
    let mut c = Count(0);
    m.visit(&mut c);
    c.0
}

impl<B: burn::tensor::backend::AutodiffBackend> DeepLabV3Plus<B> {
    /// Trainable parameters of every module id of the architecture (0 where swapped for identity).
    pub fn params_by_module(&self) -> Vec<(String, usize)> {
        self.arch
            .modules
            .iter()
            .map(|m| (m.id.clone(), self.params_of(&m.id)))
            .collect()
    }

    /// Trainable parameters of one module id (0 where swapped or absent).
    fn params_of(&self, id: &str) -> usize {
        let count = |m: Option<&dyn ModuleParams<B>>| m.map_or(0, |m| m.trainable());
        let bb = &self.backbone;
        let aspp = self.aspp.as_ref();
        let dec = self.decoder.as_ref();
        if let Some(i) = ids::block_layer(id) {
            let k = id.rsplit('.').next().and_then(|k| k.parse::<usize>().ok());
            let b = k.and_then(|k| bb.layers[i].get(k)?.as_ref());
            return count(b.map(|b| b as &dyn ModuleParams<B>));
        }
        if let Some(i) = ids::ASPP_BRANCHES.iter().position(|b| *b == id) {
            let b = match i {
                0 => aspp
                    .and_then(|a| a.branch0.as_ref())
                    .map(|b| b as &dyn ModuleParams<B>),
                _ => aspp.and_then(|a| a.atrous[i - 1].as_ref()).map(|b| b as _),
            };
            return count(b);
        }
        if let Some(k) = ids::DECODER_FUSE.iter().position(|f| *f == id) {
            return count(dec.and_then(|d| d.fuse[k].as_ref()).map(|f| f as _));
        }
        let m: Option<&dyn ModuleParams<B>> = match id {
            ids::CONV1 => Some(&bb.conv1),
            ids::BN1 => Some(&bb.bn1),
            ids::ASPP => aspp.map(|a| a as _),
            ids::ASPP_POOL => aspp.and_then(|a| a.pool.as_ref()).map(|p| p as _),
            ids::ASPP_PROJECT => aspp.map(|a| &a.project as _),
            ids::ATTENTION => self.attention.as_ref().map(|a| a as _),
            ids::AUX_HEAD => self.aux_head.as_ref().map(|a| a as _),
            ids::DECODER => dec.map(|d| d as _),
            ids::DECODER_PROJECT => dec.and_then(|d| d.project.as_ref()).map(|p| p as _),
            ids::CLASSIFIER => Some(&self.classifier),
            _ => None,
        };
        count(m)
    }
}

/// Any module whose trainable parameters can be counted (object-safe, for `params_of`).
trait ModuleParams<B: burn::tensor::backend::AutodiffBackend> {
    fn trainable(&self) -> usize;
}

impl<B: burn::tensor::backend::AutodiffBackend, M: Module<B>> ModuleParams<B> for M {
    fn trainable(&self) -> usize {
        trainable_params(self)
    }
}
