//! The cuDNN library asked ([`load`]): chosen once, its functions bound from it alone.

use cudarc::cudnn::sys as dnn;
use dnn::cudnnBackendAttributeName_t as Attr;
use dnn::cudnnBackendAttributeType_t as Ty;
use dnn::cudnnBackendDescriptorType_t as Kind;
use std::ffi::c_void;
use std::sync::OnceLock;

/// Names the cuDNN library to ask (a file, or a directory holding `libcudnn.so*`), or `none`.
pub const CUDNN_ENV: &str = "OOM_BISECT_CUDNN";

type Status = dnn::cudnnStatus_t;
type Raw = dnn::cudnnBackendDescriptor_t;
type VersionFn = unsafe extern "C" fn() -> usize;
type CreateFn = unsafe extern "C" fn(*mut dnn::cudnnHandle_t) -> Status;
type CreateDescriptorFn = unsafe extern "C" fn(Kind, *mut Raw) -> Status;
type DescriptorFn = unsafe extern "C" fn(Raw) -> Status;
type SetAttributeFn = unsafe extern "C" fn(Raw, Attr, Ty, i64, *const c_void) -> Status;
type GetAttributeFn = unsafe extern "C" fn(Raw, Attr, Ty, i64, *mut i64, *mut c_void) -> Status;

/// The functions of the cuDNN this process asks, bound from the one library chosen
/// ([`load`]), so that no other copy on the loader's path answers in its place.
pub(super) struct Api {
    pub(super) version: VersionFn,
    pub(super) create: CreateFn,
    pub(super) create_descriptor: CreateDescriptorFn,
    pub(super) destroy_descriptor: DescriptorFn,
    pub(super) set_attribute: SetAttributeFn,
    pub(super) get_attribute: GetAttributeFn,
    pub(super) finalize: DescriptorFn,
}

static API: OnceLock<Api> = OnceLock::new();

/// The bound functions; only called once [`load`] succeeded.
pub(super) fn api() -> &'static Api {
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
pub(super) fn load() -> Result<usize, String> {
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
