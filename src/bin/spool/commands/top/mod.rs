//! `spool top`: the live full-screen view of a spool. The model — what a
//! refresh reads, the tabs' rows, the filter, the actions — is
//! `spool::ops::top`; this module reads keys and [`draw`] draws.
//!
//! The terminal is restored (raw mode off, the alternate screen left,
//! the cursor shown) whatever ends the view: `q`, an error, a panic (the
//! panic hook restores it before the process's own hook reports), or
//! SIGINT/SIGTERM (checked between key polls).

mod draw;

use super::signals::Signals;
use super::Ctx;
use crate::exit::{self, CliError};
use clap::Args;
use ratatui::backend::CrosstermBackend;
use ratatui::crossterm::event::{self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::crossterm::{cursor, execute, terminal};
use ratatui::Terminal;
use spool::ops::top::{apply, read_shapes, Action, Plan, Scope, Shapes, Tab, Top, TopOptions};
use spool::units::parse_duration;
use spool::{OpenMode, Timestamp};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// Watch a spool live: counts, depth and delivery rate, shape, items
///
/// A full-screen view refreshed every --interval: a header (spool,
/// backend, depth, held, dead letters, retained, in flight — on
/// PostgreSQL also the items leased by running replayers —, the oldest
/// item's age, the push watermark), the depth and the delivery rate
/// over the session as sparklines, the pending items' shape by error
/// class (`spool shape`), the top dead-letter reasons, and a list with
/// tabs for pending, held, dead and delivered items, filtered by text
/// with `/`. The delivery rate is the items per second that left the
/// pending set other than as dead letters between two refreshes.
///
/// Keys act on the selected item (h hold, r release, u requeue a dead
/// letter, d mark done) or, in capitals, on every item the filter
/// matched in the list; each asks for confirmation and names the count.
/// --read-only disables them. `?` shows every key, `q` quits.
///
/// Refreshes read the spool read-only, page by page (never the whole
/// spool, except for the shape), and take no lock that blocks enqueue or
/// replay; an action opens the spool for writing only for its moment.
/// Needs a terminal: in scripts use `spool stats` or `spool shape`.
///
/// Examples:
///   spool top
///   spool top --interval 250ms
///   spool top --read-only
///   spool top --filter 'HTTP 503'
#[derive(Args, Debug)]
#[command(verbatim_doc_comment)]
pub struct TopArgs {
    /// Time between refreshes
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_interval)]
    interval: Duration,

    /// Show only: refuse hold, release, requeue and mark done
    #[arg(long)]
    read_only: bool,

    /// Start with this filter, as if typed after `/`
    #[arg(long, value_name = "TEXT")]
    filter: Option<String>,

    /// Run one refresh without a terminal and print its cost as JSON (benchmarks)
    #[arg(long, hide = true)]
    once: bool,
}

/// A positive duration.
fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err("the interval must be more than 0, e.g. 1s or 250ms".into());
    }
    Ok(d)
}

const ACTION: &str = "show";

pub fn run(args: TopArgs, ctx: &mut Ctx) -> Result<(), CliError> {
    let mut opts = TopOptions {
        read_only: args.read_only,
        ..TopOptions::default()
    };
    let model = |opts: TopOptions| {
        let mut model = Top::new(opts);
        if let Some(f) = &args.filter {
            model.set_filter(f);
        }
        model
    };
    if args.once {
        return once(ctx, model(opts));
    }
    if !std::io::stdout().is_terminal() || !std::io::stdin().is_terminal() {
        return Err(CliError::new(
            exit::USAGE,
            format!(
                "top {}: needs a terminal (stdin and stdout must be a tty)",
                ctx.shown()
            ),
        )
        .hint("in scripts use `spool shape` (or --json) or `spool stats` (or --json)"));
    }
    let spool = ctx.open(OpenMode::ReadOnly, ACTION)?;
    let mut shapes = ShapeWorker::start(&spool, opts.clone());
    opts.inline_shapes = shapes.is_none();
    let mut model = model(opts);
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let signals = Signals::handle(move |_| flag.store(true, Ordering::SeqCst), None)?;
    let mut screen = Screen::new(args.interval);
    let guard = TerminalGuard::enter()
        .map_err(|e| CliError::new(exit::IO, format!("top {}: terminal: {e}", ctx.shown())))?;
    let result = screen.run(ctx, &spool, &mut model, shapes.as_mut(), &stop);
    drop(guard);
    result?;
    match signals.exit_code() {
        Some(code) => Err(CliError::Silent(code)),
        None => Ok(()),
    }
}

/// One refresh without a terminal: `{"counts_ms", "rows_ms", "shape_ms",
/// "refresh_ms", "depth", "rows", "scanned"}` on stdout
/// (`benches/top.sh`).
fn once(ctx: &mut Ctx, mut model: Top) -> Result<(), CliError> {
    let spool = ctx.open(OpenMode::ReadOnly, ACTION)?;
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    model
        .refresh(&spool, ctx.now())
        .map_err(|e| ctx.fail(ACTION, e))?;
    let c = model.costs();
    ctx.out.json(&serde_json::json!({
        "counts_ms": ms(c.counts),
        "rows_ms": ms(c.rows),
        "refresh_ms": ms(c.counts + c.rows),
        "shape_ms": c.shape.map(ms),
        "depth": model.header().depth,
        "rows": model.rows().len(),
        "scanned": model.scanned(),
    }))
}

/// The shapes, computed on a thread of their own with a read-only handle
/// of its own, so that a slow one (a walk over a large NDJSON spool) never
/// holds up the screen.
struct ShapeWorker {
    ask: mpsc::Sender<Timestamp>,
    answers: mpsc::Receiver<spool::Result<Shapes>>,
    busy: bool,
}

impl ShapeWorker {
    /// `None` when the spool has no second handle or the thread cannot
    /// start: the model then computes the shapes itself.
    fn start(spool: &spool::Spool, opts: TopOptions) -> Option<ShapeWorker> {
        let reader = spool.reader().ok().flatten()?;
        let (ask, asked) = mpsc::channel::<Timestamp>();
        let (tell, answers) = mpsc::channel();
        std::thread::Builder::new()
            .name("spool-top-shapes".into())
            .spawn(move || {
                for now in asked {
                    if tell.send(read_shapes(reader.queue(), &opts, now)).is_err() {
                        break;
                    }
                }
            })
            .ok()?;
        Some(ShapeWorker {
            ask,
            answers,
            busy: false,
        })
    }

    /// Hand the model the shapes that are ready, and ask for new ones when
    /// they are due; the error of a computation that failed.
    fn poll(&mut self, model: &mut Top, now: Timestamp) -> Option<spool::Error> {
        let mut failed = None;
        if let Ok(answer) = self.answers.try_recv() {
            self.busy = false;
            match answer {
                Ok(shapes) => model.set_shapes(shapes),
                Err(e) => failed = Some(e),
            }
        }
        if !self.busy && model.shapes_due() && self.ask.send(now).is_ok() {
            self.busy = true;
            model.shapes_started();
        }
        failed
    }
}

/// Raw mode and the alternate screen, left when dropped and by the
/// panic hook.
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> std::io::Result<TerminalGuard> {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            restore();
            previous(info);
        }));
        terminal::enable_raw_mode()?;
        let guard = TerminalGuard;
        execute!(
            std::io::stdout(),
            terminal::EnterAlternateScreen,
            cursor::Hide
        )?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore();
    }
}

fn restore() {
    let _ = terminal::disable_raw_mode();
    let _ = execute!(
        std::io::stdout(),
        terminal::LeaveAlternateScreen,
        cursor::Show
    );
}

/// What the keys are doing.
#[derive(Debug)]
enum Mode {
    /// Browsing.
    Normal,
    /// Typing a filter (the text so far).
    Filter(String),
    /// Waiting for y/n on an action.
    Confirm(Plan),
    /// The key list.
    Help,
}

/// The screen's own state: the mode, the status line, the refresh clock.
struct Screen {
    mode: Mode,
    status: Option<String>,
    interval: Duration,
    next_refresh: Instant,
    /// The rows the list showed at the last draw.
    page: usize,
    error: Option<String>,
}

impl Screen {
    fn new(interval: Duration) -> Screen {
        Screen {
            mode: Mode::Normal,
            status: None,
            interval,
            next_refresh: Instant::now(),
            page: 10,
            error: None,
        }
    }

    fn run(
        &mut self,
        ctx: &Ctx,
        spool: &spool::Spool,
        model: &mut Top,
        mut shapes: Option<&mut ShapeWorker>,
        stop: &AtomicBool,
    ) -> Result<(), CliError> {
        let io = |e: std::io::Error| CliError::new(exit::IO, format!("top: terminal: {e}"));
        let mut term = Terminal::new(CrosstermBackend::new(std::io::stdout())).map_err(io)?;
        loop {
            if Instant::now() >= self.next_refresh {
                self.refresh(ctx, spool, model);
            }
            if let Some(e) = shapes.as_mut().and_then(|w| w.poll(model, ctx.now())) {
                self.error = Some(ctx.fail("compute the shape of", e).to_string_line());
            }
            term.draw(|f| self.page = draw::draw(f, model, self))
                .map_err(io)?;
            if stop.load(Ordering::SeqCst) {
                return Ok(());
            }
            let wait = self
                .next_refresh
                .saturating_duration_since(Instant::now())
                .min(Duration::from_millis(100));
            if !event::poll(wait).map_err(io)? {
                continue;
            }
            match event::read().map_err(io)? {
                Event::Key(k) if k.kind != KeyEventKind::Release && self.key(k, ctx, model) => {
                    return Ok(());
                }
                _ => {}
            }
        }
    }

    fn refresh(&mut self, ctx: &Ctx, spool: &spool::Spool, model: &mut Top) {
        self.error = model
            .refresh(spool, ctx.now())
            .err()
            .map(|e| ctx.fail("refresh", e).to_string_line());
        self.next_refresh = Instant::now() + self.interval;
    }

    /// Handle one key; `true` to quit.
    fn key(&mut self, k: KeyEvent, ctx: &Ctx, model: &mut Top) -> bool {
        let ctrl_c = k.modifiers.contains(KeyModifiers::CONTROL) && k.code == KeyCode::Char('c');
        if ctrl_c {
            return true;
        }
        match std::mem::replace(&mut self.mode, Mode::Normal) {
            Mode::Help => {
                if k.code == KeyCode::Char('q') {
                    return true;
                }
            }
            Mode::Filter(mut text) => match k.code {
                KeyCode::Enter => {
                    model.set_filter(&text);
                    self.next_refresh = Instant::now();
                }
                KeyCode::Esc => {}
                KeyCode::Backspace => {
                    text.pop();
                    self.mode = Mode::Filter(text);
                }
                KeyCode::Char(c) => {
                    text.push(c);
                    self.mode = Mode::Filter(text);
                }
                _ => self.mode = Mode::Filter(text),
            },
            Mode::Confirm(plan) => match k.code {
                KeyCode::Char('y') | KeyCode::Char('Y') => {
                    self.status = Some(act(ctx, &plan));
                    self.next_refresh = Instant::now();
                }
                _ => self.status = Some("cancelled: nothing changed".into()),
            },
            Mode::Normal => return self.normal_key(k, model),
        }
        false
    }

    fn normal_key(&mut self, k: KeyEvent, model: &mut Top) -> bool {
        let page = self.page.max(1) as isize;
        let mut refresh = false;
        match k.code {
            KeyCode::Char('q') => return true,
            KeyCode::Char('?') => self.mode = Mode::Help,
            KeyCode::Char('/') => self.mode = Mode::Filter(model.filter().to_string()),
            KeyCode::Esc if !model.filter().is_empty() => {
                model.set_filter("");
                refresh = true;
            }
            KeyCode::Tab | KeyCode::Right => {
                model.set_tab(model.tab().next());
                refresh = true;
            }
            KeyCode::BackTab | KeyCode::Left => {
                model.set_tab(model.tab().previous());
                refresh = true;
            }
            KeyCode::Char(c @ '1'..='4') => {
                model.set_tab(Tab::ALL[(c as u8 - b'1') as usize]);
                refresh = true;
            }
            KeyCode::Down | KeyCode::Char('j') => model.move_selection(1),
            KeyCode::Up | KeyCode::Char('k') => model.move_selection(-1),
            KeyCode::PageDown => model.move_selection(page),
            KeyCode::PageUp => model.move_selection(-page),
            KeyCode::Home | KeyCode::Char('g') => model.move_selection(isize::MIN),
            KeyCode::End | KeyCode::Char('G') => model.move_selection(isize::MAX),
            KeyCode::Char(']') => {
                if model.next_window() {
                    refresh = true;
                } else {
                    self.status = Some("no more items after these".into());
                }
            }
            KeyCode::Char('[') => {
                model.first_window();
                refresh = true;
            }
            KeyCode::Char(c) => {
                let (action, scope) = match c {
                    'h' => (Action::Hold, Scope::Selected),
                    'r' => (Action::Release, Scope::Selected),
                    'u' => (Action::Requeue, Scope::Selected),
                    'd' => (Action::Done, Scope::Selected),
                    'H' => (Action::Hold, Scope::Filtered),
                    'R' => (Action::Release, Scope::Filtered),
                    'U' => (Action::Requeue, Scope::Filtered),
                    'D' => (Action::Done, Scope::Filtered),
                    _ => return false,
                };
                match model.plan(action, scope) {
                    Ok(plan) => self.mode = Mode::Confirm(plan),
                    Err(why) => self.status = Some(why.to_string()),
                }
            }
            _ => {}
        }
        if refresh {
            self.next_refresh = Instant::now();
        }
        false
    }
}

/// Carry out a confirmed plan on a read-write handle opened for it
/// alone; the status line's text.
fn act(ctx: &Ctx, plan: &Plan) -> String {
    let what = plan.action.verb();
    let spool = match ctx.open(OpenMode::ReadWrite, what) {
        Ok(s) => s,
        Err(e) => return e.to_string_line(),
    };
    match apply(&*spool, plan) {
        Ok(done) => done.message(),
        Err(e) => ctx.fail(what, e).to_string_line(),
    }
}
