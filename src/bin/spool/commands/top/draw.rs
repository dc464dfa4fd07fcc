//! Drawing `spool top`: one function from the model and the screen's
//! state to a frame. No reading of the spool here.

use super::{Mode, Screen};
use crate::render;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Clear, Paragraph, Row, Sparkline, Table, TableState};
use ratatui::Frame;
use spool::ops::shape::Shape;
use spool::ops::top::{Tab, Top};
use std::time::Duration;

/// The keys, as `?` shows them (and the README's table).
const KEYS: &[(&str, &str)] = &[
    ("q, Ctrl-C", "quit (the terminal is restored)"),
    ("?", "show or hide this list"),
    ("Tab, →  /  Shift-Tab, ←", "next / previous tab"),
    ("1 2 3 4", "pending, held, dead, delivered tab"),
    ("↑ ↓  j k  PgUp PgDn  g G", "move the selection"),
    ("] [", "next window of items / back to the first"),
    ("/", "filter: type text, Enter applies, Esc cancels"),
    ("Esc", "clear the filter"),
    ("h  H", "hold the selected item / the filtered items"),
    ("r  R", "release the selected item / the filtered items"),
    (
        "u  U",
        "requeue the selected dead letter / the filtered ones",
    ),
    ("d  D", "mark done the selected item / the filtered items"),
    ("y  n", "confirm / cancel an action"),
];

/// Draw everything; the number of list rows that fit (for PgUp/PgDn).
pub fn draw(f: &mut Frame, model: &Top, screen: &Screen) -> usize {
    let shape_rows = model.options().shape_top.max(model.options().dead_top) as u16 + 3;
    let [head, sparks, shapes, tabs, list, status] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Length(4),
        Constraint::Length(shape_rows),
        Constraint::Length(1),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(f.area());
    header(f, head, model);
    sparklines(f, sparks, model);
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(60), Constraint::Percentage(40)]).areas(shapes);
    shape_table(f, left, "shape of pending items by error", model.shape());
    shape_table(f, right, "top dead-letter reasons", model.dead_reasons());
    tab_bar(f, tabs, model, screen);
    let fits = list_table(f, list, model);
    status_line(f, status, model, screen);
    if matches!(screen.mode, Mode::Help) {
        help(f);
    }
    fits
}

fn header(f: &mut Frame, area: Rect, model: &Top) {
    let h = model.header();
    let bold = Style::default().add_modifier(Modifier::BOLD);
    let field = |name: &str, value: String| {
        vec![
            Span::raw(format!("{name} ")),
            Span::styled(value, bold),
            Span::raw("  "),
        ]
    };
    let mut first = vec![
        Span::styled(format!("spool {}", h.location), bold),
        Span::raw(format!(" ({})  ", h.backend)),
    ];
    first.extend(field("depth", h.depth.to_string()));
    first.extend(field("held", h.held.to_string()));
    first.extend(field("dead", h.dead_letters.to_string()));
    first.extend(field("retained", h.retained.to_string()));
    let mut second = field("in flight", h.in_flight.to_string());
    if let Some(l) = h.leased {
        second.extend(field("leased", l.to_string()));
    }
    second.extend(field(
        "oldest",
        h.oldest_age.map(render::age).unwrap_or_else(|| "-".into()),
    ));
    second.extend(field(
        "push watermark",
        format!("{}/{}", h.push_watermark, h.push_assigned),
    ));
    f.render_widget(
        Paragraph::new(vec![Line::from(first), Line::from(second)]),
        area,
    );
}

fn sparklines(f: &mut Frame, area: Rect, model: &Top) {
    let [l, r] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area);
    let width = l.width.saturating_sub(2) as usize;
    let samples = model.samples();
    let skip = samples.len().saturating_sub(width);
    let depth: Vec<u64> = samples.iter().skip(skip).map(|s| s.depth).collect();
    let rates: Vec<f64> = samples
        .iter()
        .skip(skip)
        .map(|s| s.rate.unwrap_or(0.0))
        .collect();
    let now_rate = samples.back().and_then(|s| s.rate);
    // Sparklines take whole numbers: hundredths of an item per second.
    let scaled: Vec<u64> = rates.iter().map(|r| (r * 100.0).round() as u64).collect();
    f.render_widget(
        Sparkline::default()
            .block(Block::default().borders(Borders::ALL).title(format!(
                "depth {} (session max {})",
                model.header().depth,
                depth.iter().max().copied().unwrap_or(0)
            )))
            .data(&depth),
        l,
    );
    f.render_widget(
        Sparkline::default()
            .block(Block::default().borders(Borders::ALL).title(format!(
                "delivered/s {}",
                now_rate.map_or("-".into(), |r| format!("{r:.1}"))
            )))
            .data(&scaled),
        r,
    );
}

fn shape_table(f: &mut Frame, area: Rect, title: &str, shape: Option<&Shape>) {
    let block = Block::default()
        .borders(Borders::ALL)
        .title(title.to_string());
    let Some(s) = shape else {
        f.render_widget(Paragraph::new("computing…").block(block), area);
        return;
    };
    let labels = s.bucket_labels();
    // As many age buckets as fit beside the value and the total.
    let room = (area.width.saturating_sub(2 + 24 + 8) / 7) as usize;
    let shown = labels.len().min(room);
    let mut header = vec![Cell::from(s.by.name()), Cell::from("T")];
    header.extend(labels.iter().take(shown).map(|l| Cell::from(l.clone())));
    let rows = s.rows.iter().map(|r| {
        let mut c = vec![
            Cell::from(spool::ops::preview::escape(r.value.as_bytes())),
            Cell::from(r.total.to_string()),
        ];
        c.extend(
            r.counts
                .iter()
                .take(shown)
                .map(|n| Cell::from(n.to_string())),
        );
        Row::new(c)
    });
    let mut widths = vec![Constraint::Min(16), Constraint::Length(8)];
    widths.extend(std::iter::repeat_n(Constraint::Length(6), shown));
    f.render_widget(
        Table::new(rows, widths)
            .header(Row::new(header).style(Style::default().add_modifier(Modifier::BOLD)))
            .block(block),
        area,
    );
}

fn tab_bar(f: &mut Frame, area: Rect, model: &Top, screen: &Screen) {
    let h = model.header();
    let mut spans = Vec::new();
    for (i, tab) in Tab::ALL.iter().enumerate() {
        let text = format!(" {} {} ({}) ", i + 1, tab.name(), h.count(*tab));
        let style = if *tab == model.tab() {
            Style::default().add_modifier(Modifier::REVERSED | Modifier::BOLD)
        } else {
            Style::default()
        };
        spans.push(Span::styled(text, style));
        spans.push(Span::raw(" "));
    }
    match &screen.mode {
        Mode::Filter(text) => spans.push(Span::styled(
            format!(" filter: {text}_"),
            Style::default().add_modifier(Modifier::BOLD),
        )),
        _ if !model.filter().is_empty() => {
            spans.push(Span::raw(format!(" filter: {}", model.filter())))
        }
        _ => {}
    }
    f.render_widget(Paragraph::new(Line::from(spans)), area);
}

fn list_table(f: &mut Frame, area: Rect, model: &Top) -> usize {
    let tab = model.tab();
    let push = model.header().in_flight > 0;
    let (when, error) = match tab {
        Tab::Delivered => ("delivered", "evidence"),
        Tab::Dead => ("died", "last error"),
        _ => ("next retry", "last error"),
    };
    let mut names = vec![
        "id", "key", "group", "att", "age", when, "size", "preview", error,
    ];
    if push {
        names.insert(1, "push");
    }
    let rows = model.rows().iter().map(|r| {
        let row = &r.row;
        let mut c = super::super::list::cells(row).to_vec();
        c.insert(2, r.group.clone().unwrap_or_default());
        if push {
            c.insert(1, row.push_seq.map_or("-".into(), |s| s.to_string()));
        }
        Row::new(c)
    });
    let mut widths = vec![
        Constraint::Length(9),
        Constraint::Length(16),
        Constraint::Length(10),
        Constraint::Length(4),
        Constraint::Length(7),
        Constraint::Length(13),
        Constraint::Length(7),
        Constraint::Min(20),
        Constraint::Min(20),
    ];
    if push {
        widths.insert(1, Constraint::Length(6));
    }
    let title = if model.rows().is_empty() {
        format!("no {} items match", tab.name())
    } else {
        format!(
            "{} {} items shown{}{}",
            model.rows().len(),
            tab.name(),
            if model.paged() {
                " (after the first window)"
            } else {
                ""
            },
            if model.more() {
                "; more after them: ]"
            } else {
                ""
            },
        )
    };
    let mut state = TableState::default().with_selected(Some(model.selected()));
    f.render_stateful_widget(
        Table::new(rows, widths)
            .header(Row::new(names).style(Style::default().add_modifier(Modifier::BOLD)))
            .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
            .block(Block::default().borders(Borders::TOP).title(title)),
        area,
        &mut state,
    );
    area.height.saturating_sub(2) as usize
}

fn status_line(f: &mut Frame, area: Rect, model: &Top, screen: &Screen) {
    let costs = model.costs();
    let ms = |d: Duration| d.as_millis();
    let text = match (&screen.mode, &screen.error, &screen.status) {
        (Mode::Confirm(plan), _, _) => plan.question(),
        (_, Some(e), _) => e.clone(),
        (_, _, Some(s)) => s.clone(),
        _ => format!(
            "? keys  q quit  / filter  {}  refresh {} ms every {}",
            if model.options().read_only {
                "read-only"
            } else {
                "h r u d act"
            },
            ms(costs.counts + costs.rows),
            render::duration(screen.interval),
        ),
    };
    f.render_widget(
        Paragraph::new(text).style(Style::default().add_modifier(Modifier::REVERSED)),
        area,
    );
}

fn help(f: &mut Frame) {
    let area = f.area();
    let h = (KEYS.len() as u16 + 4).min(area.height);
    let w = 86.min(area.width);
    let r = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    let lines: Vec<Line> = KEYS
        .iter()
        .map(|(k, what)| Line::from(format!("{k:<26} {what}")))
        .collect();
    f.render_widget(Clear, r);
    f.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title("keys (any key closes)"),
        ),
        r,
    );
}
