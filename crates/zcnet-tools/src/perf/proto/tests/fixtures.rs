//! Messages shaped exactly as iperf3 3.9 and 3.21 write them, written from their sources
//! (`send_parameters` and `send_results` in src/iperf_api.c of each tag): the keys each
//! version writes for the given command line, in its order, with cJSON's number formatting
//! (integral values without a decimal point, `%1.15g` / `%1.17g` otherwise).

/// 3.9, `iperf3 -c host`: no `num`/`blockcount` (3.9 writes them only when set).
pub const PARAMS_3_9_TCP: &str = r#"{"tcp":true,"omit":0,"time":10,"parallel":1,"len":131072,"pacing_timer":1000,"client_version":"3.9"}"#;

/// 3.9, `iperf3 -c host -u -b 10M -l 1400 -R -P 4 --udp-counters-64bit --get-server-output`.
pub const PARAMS_3_9_UDP: &str = r#"{"udp":true,"omit":0,"time":10,"parallel":4,"reverse":true,"len":1400,"bandwidth":10000000,"pacing_timer":1000,"get_server_output":1,"udp_counters_64bit":1,"client_version":"3.9"}"#;

/// 3.21, `iperf3 -c host`.
pub const PARAMS_3_21_TCP: &str = r#"{"tcp":true,"omit":0,"time":10,"num":0,"blockcount":0,"parallel":1,"len":131072,"pacing_timer":1000,"client_version":"3.21"}"#;

/// 3.21, `iperf3 -c host -n 1G --bidir -P 2 -O 1 -C bbr -w 4M -N -Z`.
pub const PARAMS_3_21_BIDIR: &str = r#"{"tcp":true,"omit":1,"time":0,"num":1073741824,"blockcount":0,"nodelay":true,"parallel":2,"bidirectional":true,"window":4194304,"len":131072,"pacing_timer":1000,"congestion":"bbr","zerocopy":1,"client_version":"3.21"}"#;

/// 3.21, `iperf3 -c host -u` (block length from the control connection's MSS, 1 Mbit/s
/// default rate, GSO/GRO keys always written for UDP).
pub const PARAMS_3_21_UDP: &str = r#"{"udp":true,"omit":0,"time":10,"num":0,"blockcount":0,"parallel":1,"len":1448,"bandwidth":1048576,"pacing_timer":1000,"gso":0,"gso_dg_size":0,"gso_bf_size":65507,"gro":0,"gro_bf_size":65507,"client_version":"3.21"}"#;

/// 3.9 server's results for a TCP test it received (`sender_has_retransmits` -1).
pub const RESULTS_3_9_TCP_SERVER: &str = r#"{"cpu_util_total":1.3574739670954209,"cpu_util_user":0.10952939617399398,"cpu_util_system":1.2479445709214269,"sender_has_retransmits":-1,"congestion_used":"cubic","streams":[{"id":1,"bytes":12346695680,"retransmits":-1,"jitter":0,"errors":0,"packets":0,"start_time":0,"end_time":10.000182}]}"#;

/// 3.9 client's results for a 4-stream UDP test it sent.
pub const RESULTS_3_9_UDP_CLIENT: &str = r#"{"cpu_util_total":2.5,"cpu_util_user":0.5,"cpu_util_system":2,"sender_has_retransmits":0,"streams":[{"id":1,"bytes":1310400,"retransmits":-1,"jitter":0,"errors":0,"packets":936,"start_time":0,"end_time":10.000101},{"id":3,"bytes":1310400,"retransmits":-1,"jitter":0,"errors":0,"packets":936,"start_time":0,"end_time":10.000102},{"id":4,"bytes":1310400,"retransmits":-1,"jitter":0,"errors":0,"packets":936,"start_time":0,"end_time":10.000103},{"id":5,"bytes":1310400,"retransmits":-1,"jitter":0,"errors":0,"packets":936,"start_time":0,"end_time":10.000104}]}"#;

/// 3.21 server's results for a UDP test it received, with `--get-server-output` text.
pub const RESULTS_3_21_UDP_SERVER: &str = r#"{"cpu_util_total":0.87654321012345,"cpu_util_user":0.1,"cpu_util_system":0.77654321012345,"sender_has_retransmits":-1,"server_output_text":"Accepted connection from 10.0.0.1, port 40000\n[  5] local 10.0.0.2 port 5201 connected to 10.0.0.1 port 50000\n","streams":[{"id":1,"bytes":1309952,"retransmits":-1,"jitter":1.2345e-05,"errors":3,"omitted_errors":0,"packets":937,"omitted_packets":0,"start_time":0,"end_time":10.000345}]}"#;

/// 3.21 server's results for a `--bidir` TCP test with `-J --get-server-output`.
pub const RESULTS_3_21_BIDIR_SERVER_JSON: &str = r#"{"cpu_util_total":12.5,"cpu_util_user":1.25,"cpu_util_system":11.25,"sender_has_retransmits":1,"congestion_used":"bbr","server_output_json":{"start":{"version":"iperf 3.21"},"intervals":[],"end":{}},"streams":[{"id":1,"bytes":536870912,"retransmits":-1,"jitter":0,"errors":0,"omitted_errors":0,"packets":0,"omitted_packets":0,"start_time":0,"end_time":4.2},{"id":3,"bytes":536870912,"retransmits":-1,"jitter":0,"errors":0,"omitted_errors":0,"packets":0,"omitted_packets":0,"start_time":0,"end_time":4.2},{"id":4,"bytes":1073741824,"retransmits":17,"jitter":0,"errors":0,"omitted_errors":0,"packets":0,"omitted_packets":0,"start_time":0,"end_time":4.2},{"id":5,"bytes":1073741824,"retransmits":2,"jitter":0,"errors":0,"omitted_errors":0,"packets":0,"omitted_packets":0,"start_time":0,"end_time":4.2}]}"#;

/// A pre-3.2 peer: no `start_time` / `end_time`.
pub const RESULTS_PRE_3_2: &str = r#"{"cpu_util_total":1,"cpu_util_user":0,"cpu_util_system":1,"sender_has_retransmits":0,"streams":[{"id":1,"bytes":100,"retransmits":0,"jitter":0,"errors":0,"packets":0}]}"#;

/// Parses a fixture (they are all valid JSON).
pub fn value(text: &str) -> serde_json::Value {
    serde_json::from_str(text).unwrap()
}
