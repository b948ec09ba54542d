//! The question PyTorch's `Conv_v8.cpp` asks cuDNN for one convolution, asked through the
//! backend API: the operation graph, the engine configs in order, each one's plan and workspace.

use super::library::api;
use cubecl_runtime::memory_management::oom_bisect::Conv;
use cudarc::cudnn::sys as dnn;
use dnn::cudnnBackendAttributeName_t as Attr;
use dnn::cudnnBackendAttributeType_t as Ty;
use dnn::cudnnBackendDescriptorType_t as Kind;
use std::ffi::c_void;

type Raw = dnn::cudnnBackendDescriptor_t;

/// cuDNN's backend API with one handle.
pub(super) struct Cudnn {
    handle: dnn::cudnnHandle_t,
    version: usize,
}

// SAFETY: the handle is only used under the mutex in `STATE`, one call at a time.
unsafe impl Send for Cudnn {}

/// Creates a handle (on the current device's primary context); the library is loaded.
pub(super) fn open(version: usize) -> Result<Cudnn, String> {
    let mut handle: dnn::cudnnHandle_t = std::ptr::null_mut();
    // SAFETY: `handle` is written by cuDNN.
    check(unsafe { (api().create)(&mut handle) }, "cudnnCreate")?;
    Ok(Cudnn { handle, version })
}

fn check(status: dnn::cudnnStatus_t, what: &str) -> Result<(), String> {
    match status {
        dnn::cudnnStatus_t::CUDNN_STATUS_SUCCESS => Ok(()),
        other => Err(format!("{what}: {other:?}")),
    }
}

/// One backend descriptor, destroyed with it.
struct Desc(dnn::cudnnBackendDescriptor_t);

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created by cudnnBackendCreateDescriptor, destroyed once.
        unsafe {
            (api().destroy_descriptor)(self.0);
        }
    }
}

impl Desc {
    fn new(kind: Kind) -> Result<Desc, String> {
        let mut d: dnn::cudnnBackendDescriptor_t = std::ptr::null_mut();
        // SAFETY: cuDNN writes the descriptor.
        check(
            unsafe { (api().create_descriptor)(kind, &mut d) },
            "cudnnBackendCreateDescriptor",
        )?;
        Ok(Desc(d))
    }

    fn set<T>(&self, name: Attr, ty: Ty, values: &[T]) -> Result<&Desc, String> {
        // SAFETY: `values` holds `len` elements of the type `ty` names.
        let s = unsafe {
            (api().set_attribute)(
                self.0,
                name,
                ty,
                values.len() as i64,
                values.as_ptr().cast::<c_void>(),
            )
        };
        check(s, &format!("set {name:?}"))?;
        Ok(self)
    }

    fn descs(&self, name: Attr, descs: &[&Desc]) -> Result<&Desc, String> {
        let raw: Vec<dnn::cudnnBackendDescriptor_t> = descs.iter().map(|d| d.0).collect();
        self.set(name, Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw)
    }

    fn finalize(self) -> Result<Desc, String> {
        // SAFETY: a descriptor of ours.
        check(unsafe { (api().finalize)(self.0) }, "finalize")?;
        Ok(self)
    }

    /// Reads attribute `name` of type `ty` into `out` (room for `out.len()` elements of it);
    /// returns how many cuDNN wrote (or, with an empty `out`, how many there are).
    ///
    /// # Safety
    /// `T` is the C type `ty` names (a descriptor handle for `CUDNN_TYPE_BACKEND_DESCRIPTOR`).
    unsafe fn get<T>(&self, name: Attr, ty: Ty, out: &mut [T]) -> Result<usize, String> {
        let mut n = 0i64;
        let ptr = match out.is_empty() {
            true => std::ptr::null_mut(),
            false => out.as_mut_ptr().cast::<c_void>(),
        };
        // SAFETY: `out` has room for `out.len()` elements of `ty` (the caller's promise).
        let s = unsafe { (api().get_attribute)(self.0, name, ty, out.len() as i64, &mut n, ptr) };
        check(s, &format!("get {name:?}"))?;
        Ok(n.max(0) as usize)
    }

    fn get_i64(&self, name: Attr) -> Result<i64, String> {
        let mut v = [0i64];
        // SAFETY: one INT64.
        unsafe { self.get(name, Ty::CUDNN_TYPE_INT64, &mut v) }?;
        Ok(v[0])
    }
}

/// The data type cuDNN is told of for `conv`'s tensors.
fn data_type(conv: &Conv) -> dnn::cudnnDataType_t {
    use dnn::cudnnDataType_t as D;
    match (conv.dtype_bytes, conv.bf16) {
        (8, _) => D::CUDNN_DATA_DOUBLE,
        (2, true) => D::CUDNN_DATA_BFLOAT16,
        (2, false) => D::CUDNN_DATA_HALF,
        _ => D::CUDNN_DATA_FLOAT,
    }
}

/// Contiguous NCHW strides, with PyTorch's `fixSizeOneDimStride` for dimensions of size 1.
fn strides(dims: [usize; 4]) -> [i64; 4] {
    let mut s = [0i64; 4];
    let mut z = 1i64;
    // A dimension of size 1 takes the stride of the next larger one; on a contiguous tensor
    // that is the contiguous stride, so one rule serves both.
    for d in [3, 2, 1, 0] {
        s[d] = z;
        z *= dims[d] as i64;
    }
    s
}

/// A finalized tensor descriptor of `dims` with id `uid`.
fn tensor(dims: [usize; 4], uid: u8, dt: dnn::cudnnDataType_t) -> Result<Desc, String> {
    let d = Desc::new(Kind::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
    let dims64 = dims.map(|v| v as i64);
    d.set(
        Attr::CUDNN_ATTR_TENSOR_DATA_TYPE,
        Ty::CUDNN_TYPE_DATA_TYPE,
        &[dt],
    )?
    .set(
        Attr::CUDNN_ATTR_TENSOR_DIMENSIONS,
        Ty::CUDNN_TYPE_INT64,
        &dims64,
    )?
    .set(
        Attr::CUDNN_ATTR_TENSOR_STRIDES,
        Ty::CUDNN_TYPE_INT64,
        &strides(dims),
    )?
    .set(
        Attr::CUDNN_ATTR_TENSOR_UNIQUE_ID,
        Ty::CUDNN_TYPE_INT64,
        &[uid as i64],
    )?
    .set(
        Attr::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT,
        Ty::CUDNN_TYPE_INT64,
        &[32i64],
    )?;
    d.finalize()
}

/// The convolution descriptor (PyTorch: float compute for half and bfloat16).
fn convolution(conv: &Conv) -> Result<Desc, String> {
    use dnn::cudnnDataType_t as D;
    let compute = match data_type(conv) {
        D::CUDNN_DATA_DOUBLE => D::CUDNN_DATA_DOUBLE,
        _ => D::CUDNN_DATA_FLOAT,
    };
    let two = |v: [usize; 2]| v.map(|x| x as i64);
    let d = Desc::new(Kind::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)?;
    d.set(
        Attr::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS,
        Ty::CUDNN_TYPE_INT64,
        &[2i64],
    )?
    .set(
        Attr::CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
        Ty::CUDNN_TYPE_DATA_TYPE,
        &[compute],
    )?
    .set(
        Attr::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
        Ty::CUDNN_TYPE_CONVOLUTION_MODE,
        &[dnn::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION],
    )?
    .set(
        Attr::CUDNN_ATTR_CONVOLUTION_DILATIONS,
        Ty::CUDNN_TYPE_INT64,
        &two(conv.dilation),
    )?
    .set(
        Attr::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES,
        Ty::CUDNN_TYPE_INT64,
        &two(conv.stride),
    )?
    .set(
        Attr::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS,
        Ty::CUDNN_TYPE_INT64,
        &two(conv.padding),
    )?
    .set(
        Attr::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS,
        Ty::CUDNN_TYPE_INT64,
        &two(conv.padding),
    )?;
    d.finalize()
}

/// The one-convolution operation of `conv`'s pass, with alpha 1 and beta 0.
fn operation(conv: &Conv) -> Result<Desc, String> {
    let dt = data_type(conv);
    let (x, w, y) = (
        tensor(conv.x, b'x', dt)?,
        tensor(conv.w, b'w', dt)?,
        tensor(conv.y, b'y', dt)?,
    );
    let c = convolution(conv)?;
    use Attr::*;
    let (kind, [ax, aw, ay, ac, aa, ab]) = match conv.pass {
        0 => (
            Kind::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
            [
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
            ],
        ),
        1 => (
            Kind::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
            [
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
            ],
        ),
        _ => (
            Kind::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
            [
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
            ],
        ),
    };
    let op = Desc::new(kind)?;
    op.descs(ax, &[&x])?
        .descs(aw, &[&w])?
        .descs(ay, &[&y])?
        .descs(ac, &[&c])?;
    if dt == dnn::cudnnDataType_t::CUDNN_DATA_DOUBLE {
        op.set(aa, Ty::CUDNN_TYPE_DOUBLE, &[1.0f64])?
            .set(ab, Ty::CUDNN_TYPE_DOUBLE, &[0.0f64])?;
    } else {
        op.set(aa, Ty::CUDNN_TYPE_FLOAT, &[1.0f32])?
            .set(ab, Ty::CUDNN_TYPE_FLOAT, &[0.0f32])?;
    }
    op.finalize()
}

impl Cudnn {
    /// The workspace of each engine PyTorch tries for `conv`: the instant heuristics' configs,
    /// then the fallback list's, filtered and built as PyTorch does.
    pub(super) fn engines(&self, conv: &Conv) -> Result<Vec<u64>, String> {
        let op = operation(conv)?;
        let graph = Desc::new(Kind::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
        graph
            .descs(Attr::CUDNN_ATTR_OPERATIONGRAPH_OPS, &[&op])?
            .set(
                Attr::CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
                Ty::CUDNN_TYPE_HANDLE,
                &[self.handle],
            )?;
        let graph = graph.finalize()?;
        let mut sizes = Vec::new();
        for mode in [
            dnn::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_INSTANT,
            dnn::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_FALLBACK,
        ] {
            for config in self.configs(&graph, mode)? {
                if let Some(size) = self.workspace(conv, &config)? {
                    sizes.push(size);
                    // An engine without a workspace always runs: none after it is tried.
                    if size == 0 {
                        return Ok(sizes);
                    }
                }
            }
        }
        Ok(sizes)
    }

    /// Every engine config heuristics `mode` gives for `graph`, in its order.
    fn configs(
        &self,
        graph: &Desc,
        mode: dnn::cudnnBackendHeurMode_t,
    ) -> Result<Vec<Desc>, String> {
        let heur = Desc::new(Kind::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
        heur.descs(Attr::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[graph])?
            .set(
                Attr::CUDNN_ATTR_ENGINEHEUR_MODE,
                Ty::CUDNN_TYPE_HEUR_MODE,
                &[mode],
            )?;
        let heur = heur.finalize()?;
        let results = Attr::CUDNN_ATTR_ENGINEHEUR_RESULTS;
        let descriptor = Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR;
        // SAFETY: a count query (nothing written).
        let count = unsafe { heur.get::<Raw>(results, descriptor, &mut []) }?;
        let configs: Vec<Desc> = (0..count)
            .map(|_| Desc::new(Kind::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))
            .collect::<Result<_, _>>()?;
        let mut raw: Vec<Raw> = configs.iter().map(|d| d.0).collect();
        // SAFETY: `raw` holds `count` created descriptors for cuDNN to fill.
        let got = unsafe { heur.get(results, descriptor, &mut raw) }?;
        Ok(configs.into_iter().take(got).collect())
    }

    /// The workspace of `config`'s plan, or `None` where PyTorch would not run it: a config that
    /// down-converts its inputs, one cuDNN refuses to build, or one PyTorch's errata list names.
    fn workspace(&self, conv: &Conv, config: &Desc) -> Result<Option<u64>, String> {
        let engine = Desc::new(Kind::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
        // SAFETY: one created descriptor handed to cuDNN to fill.
        unsafe {
            config.get(
                Attr::CUDNN_ATTR_ENGINECFG_ENGINE,
                Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                &mut [engine.0],
            )
        }?;
        if notes(&engine)?.contains(&DOWN_CONVERT_INPUTS) || self.erratum(conv, &engine) {
            return Ok(None);
        }
        let Ok(plan) = Desc::new(Kind::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) else {
            return Ok(None);
        };
        let built = plan
            .set(
                Attr::CUDNN_ATTR_EXECUTION_PLAN_HANDLE,
                Ty::CUDNN_TYPE_HANDLE,
                &[self.handle],
            )
            .and_then(|p| p.descs(Attr::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[config]))
            .is_ok();
        if !built {
            return Ok(None);
        }
        match plan.finalize() {
            Ok(plan) => Ok(Some(
                plan.get_i64(Attr::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)?
                    .max(0) as u64,
            )),
            Err(_) => Ok(None),
        }
    }

    /// PyTorch's built-in errata for 2-D convolutions (`plan_errata_exception`): engine 5 of the
    /// forward pass with cuDNN 9.23.1 to 9.24.
    fn erratum(&self, conv: &Conv, engine: &Desc) -> bool {
        conv.pass == 0
            && (92301..92400).contains(&self.version)
            && engine.get_i64(Attr::CUDNN_ATTR_ENGINE_GLOBAL_INDEX) == Ok(5)
    }
}

/// `CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS`.
const DOWN_CONVERT_INPUTS: i32 =
    dnn::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS as i32;

/// The numerical notes of `engine`, read as integers (a newer cuDNN may know notes this binding
/// does not).
fn notes(engine: &Desc) -> Result<Vec<i32>, String> {
    let mut buf = [0i32; 32];
    // SAFETY: room for 32 notes, each an enum of C int size.
    let n = unsafe {
        engine.get(
            Attr::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
            Ty::CUDNN_TYPE_NUMERICAL_NOTE,
            &mut buf,
        )
    }?;
    Ok(buf[..n.min(buf.len())].to_vec())
}

#[cfg(test)]
mod tests {
    use super::strides;

    /// PyTorch's `fixSizeOneDimStride` on contiguous NCHW tensors.
    #[test]
    fn strides_are_contiguous_with_size_one_dimensions_fixed() {
        assert_eq!(strides([2, 3, 4, 5]), [60, 20, 5, 1]);
        assert_eq!(strides([4, 2048, 1, 1]), [2048, 1, 1, 1]);
        assert_eq!(strides([1, 3, 1, 5]), [15, 5, 5, 1]);
    }
}
