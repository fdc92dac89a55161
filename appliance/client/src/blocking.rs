//! Blocking entry points for callers that are not async: [`block_on`] runs a future on a
//! per-thread compio runtime (the admin CLI, simple tests: no extra thread), and
//! [`Blocking`] keeps some client state (a [`RemotingClient`], a producer, an admin handle)
//! on a dedicated runtime thread and runs closures against it from any thread.
//!
//! The thread hop in [`Blocking::run`] costs a channel send and a wake per call; hot loops
//! (the benchmark) run their futures on runtime threads directly instead.

use std::cell::RefCell;
use std::future::Future;
use std::rc::Rc;
use std::thread::JoinHandle;
use std::time::Duration;

use compio::runtime::Runtime;
use ringmq_remoting::RemotingCommand;

use crate::error::{ClientError, Result};
use crate::transport::{ClientConfig, RemotingClient};

thread_local! {
    static RUNTIME: RefCell<Option<Rc<Runtime>>> = const { RefCell::new(None) };
}

/// Runs `fut` to completion on this thread's compio runtime (created on first use).
///
/// Client objects created inside stay bound to this thread; their background tasks
/// (readers, writers, timers) make progress whenever this thread is inside `block_on`.
/// Panics if io_uring cannot be set up (the message names the OS error) or if called from
/// inside a running compio runtime.
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let rt = RUNTIME.with(|slot| {
        slot.borrow_mut()
            .get_or_insert_with(|| {
                Rc::new(Runtime::new().unwrap_or_else(|e| {
                    panic!("cannot create the compio (io_uring) runtime for the client: {e}")
                }))
            })
            .clone()
    });
    rt.block_on(fut)
}

/// Bound on jobs queued for the runtime thread; callers block when it is full.
const JOB_QUEUE_BOUND: usize = 1024;

type Job<S> = Box<dyn FnOnce(&Rc<S>) + Send>;

/// State `S` living on its own compio runtime thread; [`Blocking::run`] executes async
/// closures against it and returns their results to the calling thread.
pub struct Blocking<S: 'static> {
    tx: Option<flume::Sender<Job<S>>>,
    thread: Option<JoinHandle<()>>,
}

impl<S: 'static> Blocking<S> {
    /// Starts the runtime thread `name` and builds the state there with `factory` (which
    /// runs inside the runtime, so it may create clients and spawn tasks).
    pub fn start<F>(name: &str, factory: F) -> Result<Self>
    where
        F: FnOnce() -> S + Send + 'static,
    {
        let (tx, rx) = flume::bounded::<Job<S>>(JOB_QUEUE_BOUND);
        let (ready_tx, ready_rx) =
            std::sync::mpsc::sync_channel::<std::result::Result<(), String>>(1);
        let thread = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let rt = match Runtime::new() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ =
                            ready_tx.send(Err(format!("cannot create the compio runtime: {e}")));
                        return;
                    }
                };
                rt.block_on(async move {
                    let state = Rc::new(factory());
                    let _ = ready_tx.send(Ok(()));
                    while let Ok(job) = rx.recv_async().await {
                        job(&state);
                    }
                    // Give detached tasks (oneway writes, shutdown hooks) a moment to flush.
                    compio::time::sleep(Duration::from_millis(10)).await;
                });
            })
            .map_err(|e| ClientError::Invalid(format!("cannot spawn client thread {name}: {e}")))?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(Self {
                tx: Some(tx),
                thread: Some(thread),
            }),
            Ok(Err(why)) => {
                let _ = thread.join();
                Err(ClientError::Invalid(why))
            }
            Err(_) => {
                let _ = thread.join();
                Err(ClientError::Invalid(format!(
                    "client thread {name} died during start-up"
                )))
            }
        }
    }

    /// Runs `f(state)` on the runtime thread and waits for its output.
    pub fn run<R, F, Fut>(&self, f: F) -> Result<R>
    where
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = R> + 'static,
        R: Send + 'static,
    {
        let (rtx, rrx) = std::sync::mpsc::sync_channel::<R>(1);
        let job: Job<S> = Box::new(move |state: &Rc<S>| {
            let state = state.clone();
            compio::runtime::spawn(async move {
                let _ = rtx.send(f(state).await);
            })
            .detach();
        });
        self.tx
            .as_ref()
            .ok_or(ClientError::Shutdown)?
            .send(job)
            .map_err(|_| ClientError::Shutdown)?;
        rrx.recv().map_err(|_| ClientError::Shutdown)
    }

    /// Like [`Blocking::run`] for closures that return a client `Result`.
    pub fn call<R, F, Fut>(&self, f: F) -> Result<R>
    where
        F: FnOnce(Rc<S>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<R>> + 'static,
        R: Send + 'static,
    {
        self.run(f)?
    }
}

impl<S: 'static> Drop for Blocking<S> {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A [`RemotingClient`] on a background runtime thread.
pub type BlockingClient = Blocking<RemotingClient>;

impl Blocking<RemotingClient> {
    /// Starts a client thread with `config`.
    pub fn new(config: ClientConfig) -> Result<Self> {
        Self::start("ringmq-client", move || RemotingClient::new(config))
    }

    /// Blocking [`RemotingClient::invoke`].
    pub fn invoke(
        &self,
        addr: &str,
        request: RemotingCommand,
        timeout: Duration,
    ) -> Result<RemotingCommand> {
        let addr = addr.to_string();
        self.call(move |c| async move { c.invoke(&addr, request, timeout).await })
    }

    /// Blocking [`RemotingClient::invoke_oneway`].
    pub fn invoke_oneway(&self, addr: &str, request: RemotingCommand) -> Result<()> {
        let addr = addr.to_string();
        self.call(move |c| async move { c.invoke_oneway(&addr, request).await })
    }
}
