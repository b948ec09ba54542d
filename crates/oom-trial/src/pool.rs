//! Trials on several workers at once: one worker per GPU (or per launcher slot), each running one
//! trial at a time through its own [`TrialRunner`].
//!
//! The search stays sequential: it asks for one result at a time ([`Pool::get`]) and, beforehand,
//! says what it will or may ask for next ([`Pool::prefetch`]). Idle workers start those ahead, so a
//! result is often ready when it is asked for. Which worker ran a trial, and when, never changes
//! what the search sees; only how soon.
//!
//! One worker is always kept for the search's next request while the search is not waiting on a
//! trial: otherwise a worker that has just finished the trial the search asked for would take a
//! guess, and the search's next request (the critical path) would wait behind it. With one worker,
//! nothing is ever started ahead: one job behaves exactly as a sequential search.

use crate::protocol::Request;
use crate::runner::TrialRunner;
use crate::trial_report::TrialReport;
use std::collections::{HashMap, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A worker's way of running trials (its place is in the runner: a GPU, a launcher).
pub type Worker = Box<dyn TrialRunner + Send + Sync>;

/// Called on a worker's thread when a trial starts (`Some(key)`) or ends (`None`): for a display of
/// what runs where.
pub type OnStart<K> = Box<dyn Fn(usize, Option<&K>) + Send + Sync>;
/// Called on a worker's thread the moment a trial ends, before anyone may ask for it: the journal.
/// Not called for trials cut short because the pool was dropped.
pub type OnFinish<K> = Box<dyn Fn(&K, &TrialReport) + Send + Sync>;

/// A finished trial and the worker that ran it.
#[derive(Debug, Clone)]
pub struct Finished {
    pub report: TrialReport,
    pub worker: usize,
}

struct State<K> {
    /// What the search asked for and waits on.
    wanted: VecDeque<(K, Request)>,
    /// What it will ask for (run before guesses).
    sure: VecDeque<(K, Request)>,
    /// What it may ask for; replaced by every new list of guesses.
    guesses: VecDeque<(K, Request)>,
    running: Vec<Option<K>>,
    done: HashMap<K, Finished>,
    /// Forks of the search asking for trials; while there are none, the search is one thread.
    forks: usize,
    /// Searchers waiting on a trial, by the trial they wait on: the worker that finishes it hands
    /// them their turn back before it takes anything else.
    awaited: HashMap<K, usize>,
    waiting: usize,
    stop: bool,
    timeline: Timeline,
}

/// Where a pool's time went, for `bench`: the rounds of dependent trials (the search's critical
/// path) and how busy each worker was.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolStats {
    /// The longest chain of trials started when the search asked for them (each a whole trial's
    /// wait); searchers side by side (forks) count as long as their longest chain. With one
    /// worker, one per trial.
    pub rounds: usize,
    /// Waits on trials started ahead and still running when asked for (part of a trial each).
    pub caught_up: usize,
    /// Time the whole search spent waiting on trials.
    pub waited: Duration,
    /// Per worker, time spent running trials (finished, or still running when asked).
    pub busy: Vec<Duration>,
    /// Since the pool started.
    pub elapsed: Duration,
}

struct Timeline {
    start: Instant,
    /// Rounds of the search while it is one thread, and of every fork period that has ended.
    rounds: usize,
    /// While the search is forked: each fork's rounds, by its thread.
    fork_rounds: HashMap<std::thread::ThreadId, usize>,
    caught_up: usize,
    waited: Duration,
    /// Since when the whole search has been waiting, while it is.
    blocked_since: Option<Instant>,
    busy: Vec<Duration>,
    /// When each worker's current trial started.
    running_since: Vec<Option<Instant>>,
}

impl Timeline {
    fn new(workers: usize) -> Timeline {
        Timeline {
            start: Instant::now(),
            rounds: 0,
            fork_rounds: HashMap::new(),
            caught_up: 0,
            waited: Duration::ZERO,
            blocked_since: None,
            busy: vec![Duration::ZERO; workers],
            running_since: vec![None; workers],
        }
    }

    /// A searcher (this thread) waits on a trial: a round of its chain if the trial starts only
    /// now, else part of one.
    fn waits(&mut self, forked: bool, started_ahead: bool) {
        let me = std::thread::current().id();
        match (started_ahead, forked) {
            (true, _) => self.caught_up += 1,
            (false, true) => *self.fork_rounds.entry(me).or_insert(0) += 1,
            (false, false) => self.rounds += 1,
        }
    }

    /// The forks have all ended: their longest chain joins the critical path.
    fn joined(&mut self) {
        self.rounds += self.longest_fork();
        self.fork_rounds.clear();
    }

    fn longest_fork(&self) -> usize {
        self.fork_rounds.values().copied().max().unwrap_or(0)
    }

    /// Marks whether every searcher now waits on a trial or not: the time the search waited.
    fn blocked(&mut self, now_blocked: bool) {
        match (now_blocked, self.blocked_since) {
            (true, None) => {
                self.blocked_since = Some(Instant::now());
            }
            (false, Some(t)) => {
                self.waited += t.elapsed();
                self.blocked_since = None;
            }
            _ => {}
        }
    }

    fn started(&mut self, worker: usize) {
        self.running_since[worker] = Some(Instant::now());
    }

    fn ended(&mut self, worker: usize) {
        if let Some(t) = self.running_since[worker].take() {
            self.busy[worker] += t.elapsed();
        }
    }

    fn stats(&self) -> PoolStats {
        let so_far = |t: Option<Instant>| t.map(|t| t.elapsed()).unwrap_or_default();
        PoolStats {
            rounds: self.rounds + self.longest_fork(),
            caught_up: self.caught_up,
            waited: self.waited + so_far(self.blocked_since),
            busy: self
                .busy
                .iter()
                .zip(&self.running_since)
                .map(|(b, r)| *b + so_far(*r))
                .collect(),
            elapsed: self.start.elapsed(),
        }
    }
}

impl<K: Clone + Eq + Hash> State<K> {
    fn known(&self, k: &K) -> bool {
        self.done.contains_key(k)
            || self.running.iter().flatten().any(|r| r == k)
            || [&self.wanted, &self.sure, &self.guesses]
                .iter()
                .any(|q| q.iter().any(|(q, _)| q == k))
    }

    /// The next trial for an idle worker, by priority; hints only while enough workers stay idle.
    fn take(&mut self) -> Option<(K, Request)> {
        if let Some(w) = self.wanted.pop_front() {
            return Some(w);
        }
        // Keep a worker for each searcher that is not waiting: its next request comes at once.
        let idle = self.running.iter().filter(|r| r.is_none()).count();
        let searchers = self.forks.max(1);
        if idle <= searchers.saturating_sub(self.waiting) {
            return None;
        }
        self.sure.pop_front().or_else(|| self.guesses.pop_front())
    }

    /// Queues hints (see [`Pool::prefetch`]): new sure trials ahead of older ones, for the newest
    /// are the search's next steps and the older (a fan-out of fixes and modules) can wait for a
    /// worker nobody else needs; new guesses replace the old.
    fn queue(&mut self, items: Vec<(K, Request)>, sure: bool) {
        if !sure {
            self.guesses.clear();
        }
        let mut new: Vec<(K, Request)> = vec![];
        for (k, r) in items {
            if !self.known(&k) && !new.iter().any(|(n, _)| *n == k) {
                new.push((k, r));
            }
        }
        match sure {
            true => new.into_iter().rev().for_each(|i| self.sure.push_front(i)),
            false => self.guesses.extend(new),
        }
    }

    /// Tells the timeline whether the whole search now waits (after `waiting` or `forks` changed).
    fn search_changed(&mut self) {
        let all_waiting = self.waiting >= self.forks.max(1);
        self.timeline.blocked(all_waiting);
    }
}

struct Shared<K> {
    state: Mutex<State<K>>,
    changed: Condvar,
    on_start: OnStart<K>,
    on_finish: OnFinish<K>,
}

impl<K> Shared<K> {
    fn lock(&self) -> MutexGuard<'_, State<K>> {
        crate::sync::lock(&self.state)
    }
}

pub struct Pool<K: Clone + Eq + Hash + Send + 'static> {
    shared: Arc<Shared<K>>,
    threads: Vec<JoinHandle<()>>,
    /// Whether guesses are started ahead (see [`Pool::without_guesses`]).
    guesses: bool,
}

impl<K: Clone + Eq + Hash + Send + 'static> Pool<K> {
    pub fn new(workers: Vec<Worker>, on_start: OnStart<K>, on_finish: OnFinish<K>) -> Pool<K> {
        assert!(!workers.is_empty(), "a pool needs a worker");
        let shared = Arc::new(Shared {
            state: Mutex::new(State {
                wanted: VecDeque::new(),
                sure: VecDeque::new(),
                guesses: VecDeque::new(),
                running: vec![None; workers.len()],
                done: HashMap::new(),
                forks: 0,
                awaited: HashMap::new(),
                waiting: 0,
                stop: false,
                timeline: Timeline::new(workers.len()),
            }),
            changed: Condvar::new(),
            on_start,
            on_finish,
        });
        let threads = workers
            .into_iter()
            .enumerate()
            .map(|(i, w)| {
                let shared = Arc::clone(&shared);
                std::thread::spawn(move || work(&shared, i, w.as_ref()))
            })
            .collect();
        Pool {
            shared,
            threads,
            guesses: true,
        }
    }

    /// Only what the search will ask for is started ahead, never what it may: for workers that
    /// share a device, where a guess slows the trials the search waits on.
    pub fn without_guesses(mut self) -> Self {
        self.guesses = false;
        self
    }

    pub fn workers(&self) -> usize {
        self.shared.lock().running.len()
    }

    /// Where the pool's time has gone so far.
    pub fn stats(&self) -> PoolStats {
        self.shared.lock().timeline.stats()
    }

    /// Whether `key` has finished (started ahead or asked for): getting it will not wait.
    pub fn is_done(&self, key: &K) -> bool {
        self.shared.lock().done.contains_key(key)
    }

    /// Trials finished so far (journaled), asked for or not.
    pub fn finished(&self) -> usize {
        self.shared.lock().done.len()
    }

    /// Trials that will (`sure`) or may be asked for, most urgent first; new sure trials go ahead
    /// of older ones. New guesses replace the guesses not yet started; what is already known,
    /// queued or running is not queued again.
    pub fn prefetch(&self, items: Vec<(K, Request)>, sure: bool) {
        if !sure && !self.guesses {
            return;
        }
        self.shared.lock().queue(items, sure);
        self.shared.changed.notify_all();
    }

    /// The result of `key`, running `request` if nobody has started it; blocks until it is done.
    pub fn get(&self, key: &K, request: &Request) -> Finished {
        let mut st = self.shared.lock();
        st.sure.retain(|(k, _)| k != key);
        st.guesses.retain(|(k, _)| k != key);
        let started_ahead = st.running.iter().flatten().any(|r| r == key);
        if !st.known(key) {
            st.wanted.push_back((key.clone(), request.clone()));
        }
        if !st.done.contains_key(key) {
            st.waiting += 1;
            *st.awaited.entry(key.clone()).or_insert(0) += 1;
            let forked = st.forks > 0;
            st.timeline.waits(forked, started_ahead);
            st.search_changed();
        }
        self.shared.changed.notify_all();
        loop {
            if let Some(f) = st.done.get(key) {
                return f.clone();
            }
            st = self
                .shared
                .changed
                .wait(st)
                .unwrap_or_else(|e| e.into_inner());
        }
    }

    /// A thread of the search starts asking for trials beside the others (a fork); while forks
    /// exist, the thread that forked them asks for none.
    pub fn fork_searcher(&self) {
        let mut st = self.shared.lock();
        st.forks += 1;
        st.search_changed();
    }

    /// A fork is done asking.
    pub fn join_searcher(&self) {
        let mut st = self.shared.lock();
        st.forks = st.forks.saturating_sub(1);
        if st.forks == 0 {
            st.timeline.joined();
        }
        st.search_changed();
        drop(st);
        self.shared.changed.notify_all();
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> Drop for Pool<K> {
    /// Trials still running were started ahead and are not needed: they are killed, and not
    /// journaled (a killed trial says nothing about the configuration).
    fn drop(&mut self) {
        let mut st = self.shared.lock();
        st.stop = true;
        let busy = st.running.iter().any(Option::is_some);
        drop(st);
        self.shared.changed.notify_all();
        if busy {
            crate::runner::kill_running_trials();
        }
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

fn work<K: Clone + Eq + Hash>(shared: &Shared<K>, me: usize, runner: &dyn TrialRunner) {
    loop {
        let mut st = shared.lock();
        let (key, request) = loop {
            if st.stop {
                return;
            }
            if let Some(job) = st.take() {
                break job;
            }
            st = shared.changed.wait(st).unwrap_or_else(|e| e.into_inner());
        };
        st.running[me] = Some(key.clone());
        st.timeline.started(me);
        drop(st);
        (shared.on_start)(me, Some(&key));
        let report = runner.run(&request);
        (shared.on_start)(me, None);
        let mut st = shared.lock();
        st.running[me] = None;
        st.timeline.ended(me);
        if st.stop || crate::runner::interrupting() {
            return;
        }
        (shared.on_finish)(&key, &report);
        if let Some(n) = st.awaited.remove(&key) {
            st.waiting = st.waiting.saturating_sub(n);
            st.search_changed();
        }
        st.done.insert(key, Finished { report, worker: me });
        drop(st);
        shared.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::assemble;
    use crate::trial_report::ChildExit;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    /// A runner that sleeps the request's config (milliseconds) and counts what it ran.
    struct Sleepy(Arc<AtomicUsize>);

    impl TrialRunner for Sleepy {
        fn run(&self, request: &Request) -> TrialReport {
            self.0.fetch_add(1, Ordering::SeqCst);
            let ms: u64 = request.config.parse().unwrap();
            std::thread::sleep(Duration::from_millis(ms));
            assemble(&[], ChildExit::Code(0), "", ms as f64 / 1000.0)
        }
    }

    fn req(ms: u64) -> Request {
        Request {
            config: ms.to_string(),
            backend: crate::protocol::BackendKind::Cpu,
            ceiling: crate::protocol::Ceiling::None,
            engine: crate::protocol::Engine::Estimate,
            fault: None,
            timeout_seconds: None,
            switches: Default::default(),
            ceiling_by: Default::default(),
            serve: false,
            probe: false,
            fresh: false,
            ahead: false,
        }
    }

    fn pool(n: usize, ran: &Arc<AtomicUsize>, journal: &Arc<Mutex<Vec<u32>>>) -> Pool<u32> {
        let workers = (0..n)
            .map(|_| Box::new(Sleepy(Arc::clone(ran))) as Worker)
            .collect();
        let j = Arc::clone(journal);
        Pool::new(
            workers,
            Box::new(|_, _| {}),
            Box::new(move |k, _| j.lock().unwrap().push(*k)),
        )
    }

    /// Two workers run what is expected while the search waits on its own request; the expected
    /// result is then answered without running again, and every finished trial was journaled.
    #[test]
    fn idle_workers_run_what_is_expected() {
        let ran = Arc::new(AtomicUsize::new(0));
        let journal = Arc::new(Mutex::new(vec![]));
        let p = pool(2, &ran, &journal);
        p.prefetch(vec![(2, req(100))], true);
        let first = p.get(&1, &req(150));
        let second = p.get(&2, &req(100));
        assert_ne!(first.worker, second.worker, "ran on the same worker");
        assert_eq!(ran.load(Ordering::SeqCst), 2);
        let mut j = journal.lock().unwrap().clone();
        j.sort();
        assert_eq!(j, vec![1, 2]);
    }

    /// One worker never runs ahead: a sequential search spends exactly what it asks for.
    #[test]
    fn one_worker_runs_only_what_is_asked() {
        let ran = Arc::new(AtomicUsize::new(0));
        let journal = Arc::new(Mutex::new(vec![]));
        let p = pool(1, &ran, &journal);
        p.prefetch(vec![(7, req(10)), (8, req(10))], true);
        p.prefetch(vec![(9, req(10))], false);
        p.get(&1, &req(30));
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(ran.load(Ordering::SeqCst), 1);
        drop(p);
        assert_eq!(*journal.lock().unwrap(), vec![1]);
    }

    /// Without guesses, idle workers start what the search will ask for, never what it may.
    #[test]
    fn without_guesses_only_sure_trials_run_ahead() {
        let ran = Arc::new(AtomicUsize::new(0));
        let journal = Arc::new(Mutex::new(vec![]));
        let p = pool(3, &ran, &journal).without_guesses();
        p.prefetch(vec![(9, req(10))], false);
        p.prefetch(vec![(7, req(10))], true);
        p.get(&1, &req(60));
        std::thread::sleep(Duration::from_millis(50));
        drop(p);
        let mut j = journal.lock().unwrap().clone();
        j.sort();
        assert_eq!(j, vec![1, 7], "the guess ran, or the sure one did not");
    }

    /// A round is a wait of the whole search: a result started ahead and done before it is asked
    /// for costs none; the workers' busy time is what their trials took.
    #[test]
    fn stats_count_rounds_and_busy_workers() {
        let ran = Arc::new(AtomicUsize::new(0));
        let journal = Arc::new(Mutex::new(vec![]));
        let p = pool(2, &ran, &journal);
        p.prefetch(vec![(2, req(20))], true);
        p.get(&1, &req(120));
        p.get(&2, &req(20));
        p.get(&3, &req(30));
        let st = p.stats();
        assert_eq!(st.rounds, 2, "{st:?}");
        let busy: Duration = st.busy.iter().sum();
        assert!(busy >= Duration::from_millis(170), "{st:?}");
        assert!(st.waited >= Duration::from_millis(150), "{st:?}");
        assert!(st.waited <= st.elapsed && busy <= 2 * st.elapsed, "{st:?}");
    }

    /// The search's newest sure hints run before older ones (its next step before a fan-out for
    /// later); guesses come after every sure trial, and a known trial is not queued twice.
    #[test]
    fn newer_sure_trials_go_first() {
        let mut st = State {
            wanted: VecDeque::new(),
            sure: VecDeque::new(),
            guesses: VecDeque::new(),
            running: vec![None; 4],
            done: HashMap::new(),
            forks: 0,
            awaited: HashMap::new(),
            waiting: 1,
            stop: false,
            timeline: Timeline::new(4),
        };
        st.queue(vec![(1, req(1)), (2, req(1))], true);
        st.queue(vec![(9, req(1))], false);
        st.queue(vec![(3, req(1)), (4, req(1)), (1, req(1))], true);
        let order: Vec<u32> = std::iter::from_fn(|| st.take().map(|(k, _)| k)).collect();
        assert_eq!(order, vec![3, 4, 1, 2, 9]);
    }

    /// Searchers side by side count as long as their longest chain: one fork waits twice, the other
    /// once, and the search, alone again, once more.
    #[test]
    fn forks_count_as_their_longest_chain() {
        let ran = Arc::new(AtomicUsize::new(0));
        let journal = Arc::new(Mutex::new(vec![]));
        let p = Arc::new(pool(3, &ran, &journal));
        p.fork_searcher();
        p.fork_searcher();
        let fork = |keys: Vec<u32>| {
            let p = Arc::clone(&p);
            std::thread::spawn(move || {
                for k in keys {
                    p.get(&k, &req(30));
                }
                p.join_searcher();
            })
        };
        let (a, b) = (fork(vec![1, 2]), fork(vec![3]));
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(p.stats().rounds, 2);
        p.get(&4, &req(10));
        assert_eq!(p.stats().rounds, 3);
    }
}
