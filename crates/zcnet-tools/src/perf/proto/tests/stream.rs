use super::super::{stream_id, stream_plan, Direction, TestParams};

#[zcnet_testkit::test]
fn ids_skip_two_as_iperf_add_stream_does() {
    let ids: Vec<i64> = (0..6).map(stream_id).collect();
    assert_eq!(ids, vec![1, 3, 4, 5, 6, 7]);
}

fn shape(p: &TestParams) -> Vec<(i64, Direction)> {
    stream_plan(p).iter().map(|s| (s.id, s.direction)).collect()
}

#[zcnet_testkit::test]
fn forward_reverse_bidir() {
    use Direction::{ClientToServer as C2S, ServerToClient as S2C};
    let p = TestParams {
        parallel: 3,
        ..Default::default()
    };
    assert_eq!(shape(&p), vec![(1, C2S), (3, C2S), (4, C2S)]);
    let p = TestParams {
        parallel: 2,
        reverse: true,
        ..Default::default()
    };
    assert_eq!(shape(&p), vec![(1, S2C), (3, S2C)]);
    let p = TestParams {
        parallel: 2,
        bidirectional: true,
        ..Default::default()
    };
    assert_eq!(shape(&p), vec![(1, C2S), (3, C2S), (4, S2C), (5, S2C)]);
    assert!(stream_plan(&p)[0].client_sends() && stream_plan(&p)[3].server_sends());
}
