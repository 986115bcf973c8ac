use super::*;
use crate::quota::ledger::grant::has_room;

fn gpus(n: u64) -> Counted {
    Counted {
        classes: [("L4-24GB".to_string(), n * 1000)].into(),
        total: n * 1000,
    }
}

fn pod(uid: &str, at: u64) -> Entry {
    Entry::new(uid, "silver", "team-a", &gpus(1), at)
}

fn grant_of(pods: u32, at: u64) -> Entry {
    Entry::grant("g", ("silver", "team-a", &gpus(1)), pods, "r1", at)
}

/// Draws `uid` at `at` as the frontend does (core's `has_room`), waiter `w`.
fn draw(g: &mut OwnGrants<u32>, uid: &str, at: u64, w: u32) -> Draw {
    let counted = gpus(1);
    let fits = |grant: &Entry, drawn: &Counted| has_room(grant, drawn, &counted, at);
    g.draw((&pod(uid, at), &counted), at, fits, w)
}

#[test]
fn a_stream_asks_twice_what_it_reserved_lately() {
    let mut g = OwnGrants::<u32>::default();
    assert_eq!(g.want("team-a", 0), 0);
    for at in [0, 10, 20] {
        g.reserved("team-a", at);
    }
    assert_eq!(g.want("team-a", 30), 6);
    assert_eq!(g.want("team-b", 30), 0);
    // The window before still counts; two windows later nothing does.
    assert_eq!(g.want("team-a", DRAW_MS + 5), 6);
    assert_eq!(g.want("team-a", 2 * DRAW_MS + 5), 0);
}

#[test]
fn a_grant_is_drawn_from_only_once_written_and_while_it_has_room() {
    let mut g = OwnGrants::default();
    g.granted(grant_of(3, 0), pod("p1", 0), &gpus(1));
    // Being written: the next Pod's waiter is kept until it is.
    assert_eq!(draw(&mut g, "p2", 1, 7), Draw::Waits);
    assert_eq!(g.written(&[grant_of(3, 0)]), (1, vec![7]));
    assert_eq!(g.written(&[grant_of(3, 0)]), (0, vec![]), "written once");
    assert_eq!(draw(&mut g, "p2", 2, 0), Draw::Drew("g".into()));
    assert_eq!(draw(&mut g, "p3", 3, 0), Draw::Drew("g".into()));
    // Three drawn of three: found full, the grant is sealed.
    assert_eq!(draw(&mut g, "p4", 4, 0), Draw::NoRoom);
    assert!(g.is_sealed("g"));
    let uids: Vec<&str> = g.draws("g").iter().map(|e| e.uid.as_str()).collect();
    assert_eq!(uids, ["p1", "p2", "p3"]);
    assert_eq!(g.closing("g").len(), 3);
}

#[test]
fn a_grant_whose_write_went_back_takes_its_draws_and_waiters_with_it() {
    let mut g = OwnGrants::default();
    g.granted(grant_of(4, 0), pod("p1", 0), &gpus(1));
    assert_eq!(draw(&mut g, "p2", 1, 9), Draw::Waits);
    assert_eq!(g.drop_unwritten(), (1, vec![9]));
    assert!(g.draws("g").is_empty());
    assert_eq!(draw(&mut g, "p2", 2, 0), Draw::NoRoom);
}

#[test]
fn a_grant_past_its_window_has_no_room_and_is_forgotten_once_its_draws_expire() {
    let mut g = OwnGrants::default();
    g.granted(grant_of(4, 0), pod("p1", 0), &gpus(1));
    let _ = g.written(&[grant_of(4, 0)]);
    assert_eq!(draw(&mut g, "p2", DRAW_MS, 0), Draw::NoRoom);
    g.forget(DRAW_MS + ENTRY_TTL_MS - 1);
    assert_eq!(g.draws("g").len(), 1);
    g.forget(DRAW_MS + ENTRY_TTL_MS);
    assert!(g.draws("g").is_empty());
}

#[test]
fn a_namespace_at_its_max_seals_its_grants_so_they_close_at_once() {
    let mut g = OwnGrants::default();
    g.granted(grant_of(4, 0), pod("p1", 0), &gpus(1));
    // Not written yet: nothing to give back.
    assert!(!g.seal("team-a"));
    let _ = g.written(&[grant_of(4, 0)]);
    assert!(g.seal("team-a"));
    assert!(!g.seal("team-a"), "sealed once");
    assert!(g.is_sealed("g"));
    assert_eq!(draw(&mut g, "p2", 1, 0), Draw::NoRoom);
    // A stopping replica answers none of the waiters.
    let mut g = OwnGrants::default();
    g.granted(grant_of(4, 0), pod("p1", 0), &gpus(1));
    assert_eq!(draw(&mut g, "p2", 1, 3), Draw::Waits);
    assert_eq!(g.take_waiting(), vec![3]);
}
