//! The convolution workspaces PyTorch would ask for, asked of the cuDNN on this machine as PyTorch
//! asks it (`aten/src/ATen/native/cudnn/Conv_v8.cpp`, `cudnn.benchmark` off): for each convolution
//! an operation graph of that one convolution (NCHW tensors, 32-byte aligned as the caching
//! allocator's blocks are, ids `x`, `y`, `w`), then the engine configs of the instant heuristics,
//! then those of the fallback list, each list without the configs PyTorch filters out (those that
//! down-convert their inputs), each config built into an execution plan (a config cuDNN refuses to
//! build is skipped, as PyTorch skips it) whose workspace size is what PyTorch's caching allocator
//! is asked for before the convolution runs.
//!
//! The library is the one named by `OOM_BISECT_CUDNN` (a file or the directory holding it; `none`
//! asks nothing), else the one PyTorch's wheel installs (`nvidia.cudnn`, found through `python3`:
//! what the user's PyTorch runs), else the dynamic loader's. Its functions are bound from that
//! library alone. Without one, a trial's stream holds no workspaces and the report says so.

use cudarc::cudnn::sys as dnn;
use dnn::cudnnBackendAttributeName_t as Attr;
use dnn::cudnnBackendAttributeType_t as Ty;
use dnn::cudnnBackendDescriptorType_t as Kind;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Mutex, OnceLock};

pub use cubecl_runtime::memory_management::oom_bisect::Conv;

/// Names the cuDNN library to ask (a file, or a directory holding `libcudnn.so*`), or `none`.
pub const CUDNN_ENV: &str = "OOM_BISECT_CUDNN";

/// cuDNN's backend API with one handle.
struct Cudnn {
    handle: dnn::cudnnHandle_t,
    version: usize,
}

// SAFETY: the handle is only used under the mutex in `STATE`, one call at a time.
unsafe impl Send for Cudnn {}

/// What this process knows: the answers so far (read from the shared file first), where to add
/// new ones, and the handle, opened at the first convolution no one has asked about yet.
struct State {
    answers: HashMap<Conv, Vec<u64>>,
    /// The convolutions this process met, in order.
    met: Vec<Conv>,
    file: Option<std::path::PathBuf>,
    cudnn: Option<Result<Cudnn, String>>,
    /// The library's version, or why none could be loaded.
    library: Result<usize, String>,
}

static STATE: OnceLock<Mutex<State>> = OnceLock::new();

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE
        .get_or_init(|| Mutex::new(State::load()))
        .lock()
        .unwrap_or_else(|e| e.into_inner())
}

/// The cuDNN this process asks, as `cuDNN 9.14.0`, or why there is none.
pub fn available() -> Result<String, String> {
    let v = state().library.clone()?;
    Ok(format!(
        "cuDNN {}.{}.{}",
        v / 10000,
        (v % 10000) / 100,
        v % 100
    ))
}

/// The workspace of each engine PyTorch would try for `conv`, in its order, up to the first that
/// needs none (it always runs: no engine after it is ever tried); empty where cuDNN cannot be
/// asked. Asked once per convolution, card and cuDNN: answers are kept in the kernel cache
/// (`OOM_BISECT_KERNEL_CACHE`), so that later trials need neither the GPU nor cuDNN's time.
pub fn workspaces(conv: &Conv) -> Vec<u64> {
    let mut st = state();
    if !st.met.contains(conv) {
        st.met.push(*conv);
    }
    if let Some(known) = st.answers.get(conv) {
        return known.clone();
    }
    let sizes = st.ask(conv);
    st.remember(conv, &sizes);
    sizes
}

/// Every convolution this process met, in order, with its answer (for `OOM_BISECT_CUDNN_OUT`).
pub fn asked() -> Vec<(Conv, Vec<u64>)> {
    let st = state();
    st.met
        .iter()
        .map(|c| (*c, st.answers.get(c).cloned().unwrap_or_default()))
        .collect()
}

impl State {
    fn load() -> State {
        let library = load_library();
        let file = library.as_ref().ok().and_then(|&v| answers_file(v));
        let answers = file.as_deref().map(read_answers).unwrap_or_default();
        State {
            answers,
            met: Vec::new(),
            file,
            cudnn: None,
            library,
        }
    }

    fn ask(&mut self, conv: &Conv) -> Vec<u64> {
        let Ok(&version) = self.library.as_ref() else {
            return Vec::new();
        };
        let cudnn = self.cudnn.get_or_insert_with(|| open(version));
        match cudnn {
            Ok(s) => s.engines(conv).unwrap_or_default(),
            Err(_) => Vec::new(),
        }
    }

    /// Keeps `sizes` for `conv`, in this process and (where asked of cuDNN) in the shared file:
    /// one line, appended in one write, so that trials writing at once do not interleave.
    fn remember(&mut self, conv: &Conv, sizes: &[u64]) {
        self.answers.insert(*conv, sizes.to_vec());
        if sizes.is_empty() {
            return;
        }
        if let Some(path) = &self.file {
            use std::io::Write;
            let line = format!("{}\n", answer_line(conv, sizes));
            let _ = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .and_then(|mut f| f.write_all(line.as_bytes()));
        }
    }
}

/// The shared file of answers for this card and cuDNN `version`, in the kernel cache; none
/// without a kernel cache or a card.
fn answers_file(version: usize) -> Option<std::path::PathBuf> {
    let dir = std::env::var_os(crate::cache::KERNEL_CACHE_ENV).filter(|d| !d.is_empty())?;
    cudarc::driver::result::init().ok()?;
    let dev = cudarc::driver::result::device::get(0).ok()?;
    let name = cudarc::driver::result::device::get_name(dev).ok()?;
    let name: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let dir = std::path::Path::new(&dir).join("cudnn");
    std::fs::create_dir_all(&dir).ok()?;
    Some(dir.join(format!("{name}-{version}.txt")))
}

/// One answer as a line: the convolution's numbers, `:`, the workspace sizes, `.` (a line
/// without it was cut short).
fn answer_line(c: &Conv, sizes: &[u64]) -> String {
    let mut words: Vec<String> = vec![c.pass.to_string()];
    words.extend(c.x.iter().chain(&c.w).chain(&c.y).map(|v| v.to_string()));
    words.extend(
        c.stride
            .iter()
            .chain(&c.padding)
            .chain(&c.dilation)
            .map(|v| v.to_string()),
    );
    words.extend([
        c.groups.to_string(),
        c.dtype_bytes.to_string(),
        u8::from(c.bf16).to_string(),
        ":".into(),
    ]);
    words.extend(sizes.iter().map(|s| s.to_string()));
    words.push(".".into());
    words.join(" ")
}

/// A line of [`answer_line`], or `None` for one that is not (a line cut short by a crash).
fn parse_answer(line: &str) -> Option<(Conv, Vec<u64>)> {
    let (key, sizes) = line.strip_suffix(" .")?.split_once(" : ")?;
    let n: Vec<usize> = key
        .split(' ')
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    let sizes: Vec<u64> = sizes
        .split(' ')
        .map(|w| w.parse().ok())
        .collect::<Option<_>>()?;
    let four = |i: usize| -> [usize; 4] { [n[i], n[i + 1], n[i + 2], n[i + 3]] };
    let two = |i: usize| -> [usize; 2] { [n[i], n[i + 1]] };
    (n.len() == 22 && !sizes.is_empty()).then(|| {
        let conv = Conv {
            pass: n[0] as u8,
            x: four(1),
            w: four(5),
            y: four(9),
            stride: two(13),
            padding: two(15),
            dilation: two(17),
            groups: n[19],
            dtype_bytes: n[20] as u8,
            bf16: n[21] == 1,
        };
        (conv, sizes)
    })
}

fn read_answers(path: &std::path::Path) -> HashMap<Conv, Vec<u64>> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter_map(parse_answer)
        .collect()
}

/// Creates a handle (on the current device's primary context); the library is loaded.
fn open(version: usize) -> Result<Cudnn, String> {
    let mut handle: dnn::cudnnHandle_t = std::ptr::null_mut();
    // SAFETY: `handle` is written by cuDNN.
    check(unsafe { (api().create)(&mut handle) }, "cudnnCreate")?;
    Ok(Cudnn { handle, version })
}

type Status = dnn::cudnnStatus_t;
type Raw = dnn::cudnnBackendDescriptor_t;
type VersionFn = unsafe extern "C" fn() -> usize;
type CreateFn = unsafe extern "C" fn(*mut dnn::cudnnHandle_t) -> Status;
type CreateDescriptorFn = unsafe extern "C" fn(Kind, *mut Raw) -> Status;
type DescriptorFn = unsafe extern "C" fn(Raw) -> Status;
type SetAttributeFn = unsafe extern "C" fn(Raw, Attr, Ty, i64, *const c_void) -> Status;
type GetAttributeFn = unsafe extern "C" fn(Raw, Attr, Ty, i64, *mut i64, *mut c_void) -> Status;

/// The functions of the cuDNN this process asks, bound from the one library chosen
/// ([`load_library`]), so that no other copy on the loader's path answers in its place.
struct Api {
    version: VersionFn,
    create: CreateFn,
    create_descriptor: CreateDescriptorFn,
    destroy_descriptor: DescriptorFn,
    set_attribute: SetAttributeFn,
    get_attribute: GetAttributeFn,
    finalize: DescriptorFn,
}

static API: OnceLock<Api> = OnceLock::new();

/// The bound functions; only called once [`load_library`] succeeded.
fn api() -> &'static Api {
    API.get()
        .expect("cuDNN is only called after its library was loaded")
}

/// Binds [`Api`] from `handle` (a `dlopen` handle), or `None` if a symbol is missing.
fn bind(handle: *mut c_void) -> Option<Api> {
    let sym = |name: &str| -> Option<*mut c_void> {
        let c = std::ffi::CString::new(name).ok()?;
        // SAFETY: a lookup in a library this process keeps loaded.
        let p = unsafe { libc::dlsym(handle, c.as_ptr()) };
        (!p.is_null()).then_some(p)
    };
    use std::mem::transmute as cast;
    // SAFETY: each symbol is the cuDNN function of that name, whose C signature is its type's.
    unsafe {
        Some(Api {
            version: cast::<*mut c_void, VersionFn>(sym("cudnnGetVersion")?),
            create: cast::<*mut c_void, CreateFn>(sym("cudnnCreate")?),
            create_descriptor: cast::<*mut c_void, CreateDescriptorFn>(sym(
                "cudnnBackendCreateDescriptor",
            )?),
            destroy_descriptor: cast::<*mut c_void, DescriptorFn>(sym(
                "cudnnBackendDestroyDescriptor",
            )?),
            set_attribute: cast::<*mut c_void, SetAttributeFn>(sym("cudnnBackendSetAttribute")?),
            get_attribute: cast::<*mut c_void, GetAttributeFn>(sym("cudnnBackendGetAttribute")?),
            finalize: cast::<*mut c_void, DescriptorFn>(sym("cudnnBackendFinalize")?),
        })
    }
}

/// Loads the cuDNN to ask and binds its functions: the one `OOM_BISECT_CUDNN` names, else the one
/// PyTorch's wheel installs (what the user's PyTorch runs), else the loader's. Returns its version.
fn load_library() -> Result<usize, String> {
    let named = std::env::var(CUDNN_ENV).ok().filter(|v| !v.is_empty());
    if named.as_deref() == Some("none") {
        return Err(format!("{CUDNN_ENV}=none"));
    }
    let handle = match &named {
        Some(path) => open_library(std::path::Path::new(path))
            .ok_or_else(|| format!("{CUDNN_ENV}={path}: no cuDNN could be loaded from there"))?,
        None => torch_cudnn_dir()
            .and_then(|dir| open_library(&dir))
            .or_else(|| {
                ["libcudnn.so.9", "libcudnn.so"]
                    .into_iter()
                    .find_map(dlopen)
            })
            .ok_or_else(|| {
                "no cuDNN: none in PyTorch's wheel (python3 -c 'import nvidia.cudnn'), none on \
                 the loader's path; name one with OOM_BISECT_CUDNN"
                    .to_string()
            })?,
    };
    let api = bind(handle).ok_or("the cuDNN found lacks the backend API (cuDNN 8 or later)")?;
    let api = API.get_or_init(|| api);
    // SAFETY: a bound function without arguments.
    Ok(unsafe { (api.version)() })
}

/// `dlopen` of `name` (a path, or a name for the loader), kept loaded for the life of the process.
fn dlopen(name: &str) -> Option<*mut c_void> {
    let c = std::ffi::CString::new(name).ok()?;
    // SAFETY: dlopen of a library; the handle is never closed.
    let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_LAZY | libc::RTLD_GLOBAL) };
    (!h.is_null()).then_some(h)
}

/// The `lib` directory of PyTorch's cuDNN wheel (`nvidia-cudnn-cu*`), as `python3` finds it.
fn torch_cudnn_dir() -> Option<std::path::PathBuf> {
    let out = std::process::Command::new("python3")
        .args(["-c", "import nvidia.cudnn as c; print(list(c.__path__)[0])"])
        .stderr(std::process::Stdio::null())
        .output()
        .ok()?;
    let dir = String::from_utf8(out.stdout).ok()?;
    let lib = std::path::Path::new(dir.trim()).join("lib");
    lib.is_dir().then_some(lib)
}

/// Opens the cuDNN at `path` (its front library, or the directory holding it): in a directory the
/// sub-libraries first (the graph library before the others), so that the front library and the
/// engines it opens by name resolve to these and not to another copy on the loader's path.
fn open_library(path: &std::path::Path) -> Option<*mut c_void> {
    if !path.is_dir() {
        return dlopen(path.to_str()?);
    }
    let mut files: Vec<(String, std::path::PathBuf)> = std::fs::read_dir(path)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter_map(|p| Some((p.file_name()?.to_str()?.to_string(), p)))
        .filter(|(n, _)| n.starts_with("libcudnn") && n.contains(".so"))
        .collect();
    files.sort_by_key(|(n, _)| (!n.starts_with("libcudnn_graph"), n.clone()));
    let mut front = None;
    for (name, file) in &files {
        let h = dlopen(file.to_str()?);
        if name.starts_with("libcudnn.so") && front.is_none() {
            front = h;
        }
    }
    front
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

    fn get_i64(&self, name: Attr) -> Result<i64, String> {
        let (mut n, mut v) = (0i64, 0i64);
        // SAFETY: one INT64 written into `v`.
        let s = unsafe {
            (api().get_attribute)(
                self.0,
                name,
                Ty::CUDNN_TYPE_INT64,
                1,
                &mut n,
                (&mut v as *mut i64).cast(),
            )
        };
        check(s, &format!("get {name:?}"))?;
        Ok(v)
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
    fn engines(&self, conv: &Conv) -> Result<Vec<u64>, String> {
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
        let mut count = 0i64;
        // SAFETY: a count query (no elements written).
        check(
            unsafe {
                (api().get_attribute)(
                    heur.0,
                    Attr::CUDNN_ATTR_ENGINEHEUR_RESULTS,
                    Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                    0,
                    &mut count,
                    std::ptr::null_mut(),
                )
            },
            "heuristics count",
        )?;
        let configs: Vec<Desc> = (0..count)
            .map(|_| Desc::new(Kind::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))
            .collect::<Result<_, _>>()?;
        let mut raw: Vec<dnn::cudnnBackendDescriptor_t> = configs.iter().map(|d| d.0).collect();
        let mut got = 0i64;
        // SAFETY: `raw` holds `count` created descriptors for cuDNN to fill.
        check(
            unsafe {
                (api().get_attribute)(
                    heur.0,
                    Attr::CUDNN_ATTR_ENGINEHEUR_RESULTS,
                    Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                    count,
                    &mut got,
                    raw.as_mut_ptr().cast(),
                )
            },
            "heuristics results",
        )?;
        Ok(configs.into_iter().take(got.max(0) as usize).collect())
    }

    /// The workspace of `config`'s plan, or `None` where PyTorch would not run it: a config that
    /// down-converts its inputs, one cuDNN refuses to build, or one PyTorch's errata list names.
    fn workspace(&self, conv: &Conv, config: &Desc) -> Result<Option<u64>, String> {
        let engine = Desc::new(Kind::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
        let mut n = 0i64;
        // SAFETY: one descriptor handed to cuDNN to fill.
        let s = unsafe {
            (api().get_attribute)(
                config.0,
                Attr::CUDNN_ATTR_ENGINECFG_ENGINE,
                Ty::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                1,
                &mut n,
                (&engine.0 as *const dnn::cudnnBackendDescriptor_t
                    as *mut dnn::cudnnBackendDescriptor_t)
                    .cast(),
            )
        };
        check(s, "engine of config")?;
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
    let mut n = 0i64;
    // SAFETY: room for 32 notes, each an enum of C int size.
    let s = unsafe {
        (api().get_attribute)(
            engine.0,
            Attr::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
            Ty::CUDNN_TYPE_NUMERICAL_NOTE,
            buf.len() as i64,
            &mut n,
            buf.as_mut_ptr().cast(),
        )
    };
    check(s, "numerical notes")?;
    Ok(buf[..(n.clamp(0, 32) as usize)].to_vec())
}

#[cfg(test)]
mod tests {
    use super::{answer_line, parse_answer, strides, Conv};

    #[test]
    fn an_answer_reads_back_from_its_line() {
        let conv = Conv {
            pass: 2,
            x: [8, 64, 128, 128],
            w: [64, 64, 3, 3],
            y: [8, 64, 128, 128],
            stride: [1, 1],
            padding: [1, 1],
            dilation: [1, 1],
            groups: 1,
            dtype_bytes: 2,
            bf16: true,
        };
        let line = answer_line(&conv, &[67_174_400, 0]);
        assert_eq!(parse_answer(&line), Some((conv, vec![67_174_400, 0])));
        assert_eq!(
            parse_answer(&line[..line.len() - 4]),
            None,
            "a line cut short"
        );
        assert_eq!(parse_answer("2 8 64 :"), None);
    }

    /// PyTorch's `fixSizeOneDimStride` on contiguous NCHW tensors.
    #[test]
    fn strides_are_contiguous_with_size_one_dimensions_fixed() {
        assert_eq!(strides([2, 3, 4, 5]), [60, 20, 5, 1]);
        assert_eq!(strides([4, 2048, 1, 1]), [2048, 1, 1, 1]);
        assert_eq!(strides([1, 3, 1, 5]), [15, 5, 5, 1]);
    }
}
