use gpu_admission_core::quota::demand::Counted;

use super::*;

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

#[test]
fn a_stream_asks_twice_what_it_reserved_lately() {
    let mut g = OwnGrants::default();
    assert_eq!(g.want("team-a", 0), 0);
    for at in [0, 10, 20] {
        g.reserved("team-a", at);
    }
    assert_eq!(g.want("team-a", 30), 6);
    assert_eq!(g.want("team-b", 30), 0);
    // The window before still counts; two windows later nothing does.
    assert_eq!(g.want("team-a", grant::DRAW_MS + 5), 6);
    assert_eq!(g.want("team-a", 2 * grant::DRAW_MS + 5), 0);
}

#[tokio::test]
async fn a_grant_is_drawn_from_only_once_written_and_while_it_has_room() {
    let mut g = OwnGrants::default();
    g.granted(grant_of(3, 0), pod("p1", 0), &gpus(1));
    // Being written: the next Pod waits for it, then decides again.
    let Draw::Wait(rx) = g.draw(&pod("p2", 1), &gpus(1), 1) else {
        panic!("drew from a grant not written");
    };
    let back = g.written(&[grant_of(3, 0)]);
    assert_eq!(back.len(), 1);
    for w in back {
        let _ = w.send(Flushed::Retry);
    }
    assert!(matches!(rx.await, Ok(Flushed::Retry)));
    assert!(matches!(g.draw(&pod("p2", 2), &gpus(1), 2), Draw::Drew));
    assert!(matches!(g.draw(&pod("p3", 3), &gpus(1), 3), Draw::Drew));
    // Three drawn of three.
    assert!(matches!(g.draw(&pod("p4", 4), &gpus(1), 4), Draw::NoRoom));
    let uids: Vec<&str> = g.draws("g").iter().map(|e| e.uid.as_str()).collect();
    assert_eq!(uids, ["p1", "p2", "p3"]);
    assert_eq!(g.closing("g").len(), 3);
}

#[test]
fn a_grant_whose_write_went_back_takes_its_draws_and_waiters_with_it() {
    let mut g = OwnGrants::default();
    g.granted(grant_of(4, 0), pod("p1", 0), &gpus(1));
    let Draw::Wait(_rx) = g.draw(&pod("p2", 1), &gpus(1), 1) else {
        panic!("drew from a grant not written");
    };
    assert_eq!(g.drop_unwritten().len(), 1);
    assert!(g.draws("g").is_empty());
    assert!(matches!(g.draw(&pod("p2", 2), &gpus(1), 2), Draw::NoRoom));
}

#[test]
fn a_grant_past_its_window_has_no_room_and_is_forgotten_once_its_draws_expire() {
    let mut g = OwnGrants::default();
    g.granted(grant_of(4, 0), pod("p1", 0), &gpus(1));
    let _ = g.written(&[grant_of(4, 0)]);
    assert!(matches!(
        g.draw(&pod("p2", grant::DRAW_MS), &gpus(1), grant::DRAW_MS),
        Draw::NoRoom
    ));
    g.forget(grant::DRAW_MS + ENTRY_TTL_MS - 1);
    assert_eq!(g.draws("g").len(), 1);
    g.forget(grant::DRAW_MS + ENTRY_TTL_MS);
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
    assert!(matches!(g.draw(&pod("p2", 1), &gpus(1), 1), Draw::NoRoom));
    // A grant found full is sealed too.
    let mut g = OwnGrants::default();
    g.granted(grant_of(1, 0), pod("p1", 0), &gpus(1));
    let _ = g.written(&[grant_of(1, 0)]);
    assert!(matches!(g.draw(&pod("p2", 1), &gpus(1), 1), Draw::NoRoom));
    assert!(g.is_sealed("g"));
}
