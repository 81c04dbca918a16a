//! The seed: the discovery server that forms a cluster (`nexar_seed_t`).

use crate::error::{cstr_lossy, Error, Result, Status};
use libnexar_sys as sys;
use std::ffi::CString;
use std::fmt;
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};
use std::time::Duration;

/// Options of a [`Seed`] (`nexar_seed_options_t`): nexar's defaults with the
/// `NEXAR_*` environment applied, then the builder methods.
#[derive(Clone)]
pub struct SeedOptions {
    /// String pointers stay NULL here (see `Options`); no event callback.
    raw: sys::nexar_seed_options_t,
    listen_address: Option<CString>,
    cluster_token: Option<CString>,
    token_file: Option<CString>,
    ca_dir: Option<CString>,
    refused: Option<String>,
}

// SAFETY: the raw struct's pointers (strings, event callback data) stay NULL;
// the rest is plain data.
unsafe impl Send for SeedOptions {}
// SAFETY: as for Send.
unsafe impl Sync for SeedOptions {}

impl SeedOptions {
    /// Defaults (and environment) for a world of `world_size` workers.
    pub fn new(world_size: u32) -> Result<SeedOptions> {
        let mut raw = MaybeUninit::<sys::nexar_seed_options_t>::zeroed();
        let size = std::mem::size_of::<sys::nexar_seed_options_t>();
        // SAFETY: raw points to writable memory of `size` bytes.
        let st = unsafe { sys::nexar_seed_options_init(raw.as_mut_ptr(), size) };
        if st != sys::NEXAR_OK {
            return Err(Error::last(st, "seed_options", None));
        }
        // SAFETY: zeroed (valid for every field: integers, NULL pointers, None),
        // then filled in by nexar.
        let mut raw = unsafe { raw.assume_init() };
        raw.listen_address = ptr::null();
        raw.cluster_token = ptr::null();
        raw.token_file = ptr::null();
        raw.ca_dir = ptr::null();
        raw.on_event = None;
        raw.event_user_data = ptr::null_mut();
        raw.world_size = world_size;
        Ok(SeedOptions {
            raw,
            listen_address: None,
            cluster_token: None,
            token_file: None,
            ca_dir: None,
            refused: None,
        })
    }

    string_setter!(
        /// `"ip:port"` to bind (default `"127.0.0.1:0"`).
        listen_address);
    string_setter!(
        /// The token workers must know.
        cluster_token);
    string_setter!(
        /// A file holding the token (read when no token is set).
        token_file);
    string_setter!(
        /// Directory of the cluster CA (ca.pem, ca-key.pem), made if absent.
        ca_dir);

    /// Admit remote workers without a token (default: only this host's).
    pub fn open(mut self, open: bool) -> Self {
        self.raw.open = open as u32;
        self
    }

    /// How long formation may take (default 60 s).
    pub fn formation_timeout(mut self, d: Duration) -> Self {
        self.raw.formation_timeout_ms = (d.as_millis().max(1)).min(u64::MAX as u128) as u64;
        self
    }

    /// Stay up after formation and admit joiners into the running world
    /// (`Communicator::grow`; default off, or `NEXAR_SEED_ELASTIC`).
    pub fn elastic(mut self, on: bool) -> Self {
        self.raw.elastic = u32::from(on);
        self
    }

    /// With `elastic`: no grow makes a world larger than this (0: 1024, or
    /// `NEXAR_MAX_WORLD_SIZE`).
    pub fn max_world_size(mut self, n: u32) -> Self {
        self.raw.max_world_size = n;
        self
    }
}

/// A running seed. Workers join it with
/// [`Communicator::join`](crate::Communicator::join) and
/// `Options::seed_address(seed.address())`. Dropping it stops it.
pub struct Seed {
    raw: NonNull<sys::nexar_seed_t>,
    address: String,
}

// SAFETY: nexar's functions may be called from any thread; nexar_seed_stop,
// which must not race, runs in Drop (exclusive access).
unsafe impl Send for Seed {}
// SAFETY: as above; &self only reads the address or calls nexar_seed_wait.
unsafe impl Sync for Seed {}

impl Seed {
    /// Binds and starts admitting workers on a thread of its own.
    pub fn start(options: &SeedOptions) -> Result<Seed> {
        const OP: &str = "seed_start";
        if let Some(why) = &options.refused {
            return Err(Error::invalid(OP, None, why.clone()));
        }
        let p = |s: &Option<CString>| s.as_ref().map(|s| s.as_ptr()).unwrap_or(ptr::null());
        let mut raw = options.raw;
        raw.listen_address = p(&options.listen_address);
        raw.cluster_token = p(&options.cluster_token);
        raw.token_file = p(&options.token_file);
        raw.ca_dir = p(&options.ca_dir);
        let mut out = ptr::null_mut();
        // SAFETY: out is a valid place for the handle; raw's strings point
        // into `options`, alive for the call (nexar copies them).
        let st = unsafe { sys::nexar_seed_start(&mut out, &raw) };
        if st != sys::NEXAR_OK {
            return Err(Error::last(st, OP, None));
        }
        let raw = NonNull::new(out).ok_or_else(|| {
            Error::new(
                Status::Internal,
                OP,
                None,
                None,
                "no seed handle returned".into(),
            )
        })?;
        // SAFETY: a live seed; the address is static for its lifetime and copied.
        let address = unsafe { cstr_lossy(sys::nexar_seed_address(raw.as_ptr())) };
        Ok(Seed { raw, address })
    }

    /// The `"host:port"` actually bound.
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Waits up to `timeout` for formation to end: `None` while the world is
    /// still forming, `Some(Ok(()))` once every rank reported its mesh formed,
    /// `Some(Err(..))` when formation failed.
    pub fn wait(&self, timeout: Duration) -> Option<Result<()>> {
        let ms = timeout.as_millis().min(u32::MAX as u128) as u32;
        let mut ended = 0i32;
        // SAFETY: a live seed; ended is writable.
        let st = unsafe { sys::nexar_seed_wait(self.raw.as_ptr(), ms, &mut ended) };
        if ended == 0 {
            return None;
        }
        if st == sys::NEXAR_OK {
            Some(Ok(()))
        } else {
            Some(Err(Error::last(st, "seed_wait", None)))
        }
    }
}

impl Drop for Seed {
    fn drop(&mut self) {
        // SAFETY: exclusively ours (Drop), stopped once.
        unsafe { sys::nexar_seed_stop(self.raw.as_ptr()) };
    }
}

impl fmt::Debug for Seed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Seed({})", self.address)
    }
}
