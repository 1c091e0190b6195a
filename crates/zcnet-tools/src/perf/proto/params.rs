//! The client's parameter block (`PARAM_EXCHANGE`).
//!
//! iperf3 src/iperf_api.c, `send_parameters` (client) and `get_parameters` (server). The client
//! writes a key only when its option is set, with three exceptions: `"omit"`, `"time"` and
//! `"parallel"` always, and since 3.12 `"num"` and `"blockcount"` always; UDP tests of 3.21 add
//! the GSO/GRO keys always. The server starts from `iperf_defaults` and overwrites what is
//! present; unknown keys are ignored. [`TestParams::default`] is `iperf_defaults`, so a block
//! from any version, parsed here, means what it means to an iperf3 server.

use serde_json::{Map, Value};

use super::error::{ErrorCode, ProtoError};
use super::frame::{encode_frame, MAX_PARAMS_LEN};
use super::json::{self, Object};

/// The transport of the data streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Protocol {
    /// `"tcp": true` (iperf3's default).
    #[default]
    Tcp,
    /// `"udp": true`.
    Udp,
    /// `"sctp": true`.
    Sctp,
}

/// iperf3's `DURATION`: seconds of a test when nothing else is said.
pub const DEFAULT_TIME: u32 = 10;
/// iperf3's `DEFAULT_TCP_BLKSIZE`: the server's block length when `"len"` is absent.
pub const DEFAULT_TCP_LEN: u32 = 128 * 1024;
/// iperf3's `DEFAULT_UDP_BLKSIZE`: a client's UDP block length when it knows no MSS.
pub const DEFAULT_UDP_LEN: u32 = 1460;
/// iperf3's `DEFAULT_PACING_TIMER`, microseconds.
pub const DEFAULT_PACING_TIMER: u32 = 1000;
/// iperf3's `MAX_UDP_BLOCKSIZE` (65535 - 8 - 20), also the default GSO/GRO buffer size.
pub const MAX_UDP_LEN: u32 = 65535 - 8 - 20;
/// iperf3's `MIN_UDP_BLOCKSIZE`: the 16 bytes of a header with a 64-bit counter.
pub const MIN_UDP_LEN: u32 = 16;
/// iperf3's `MAX_BLOCKSIZE`.
pub const MAX_TCP_LEN: u32 = 1024 * 1024;
/// iperf3's `MAX_STREAMS`.
pub const MAX_STREAMS: u32 = 128;
/// iperf3's `MAX_TIME`, seconds.
pub const MAX_TIME: u32 = 86400;
/// iperf3's `MAX_OMIT_TIME`, seconds.
pub const MAX_OMIT: u32 = 600;
/// iperf3's `MAX_TCP_BUFFER`.
pub const MAX_WINDOW: u64 = 512 * 1024 * 1024;
/// iperf3's `MAX_MSS`.
pub const MAX_MSS: u32 = 32 * 1024 - 1;
/// iperf3's `MAX_BURST`.
pub const MAX_BURST: u32 = 1000;

/// The parameter block, one field per iperf3 key (the key is in each field's doc).
#[derive(Debug, Clone, PartialEq)]
pub struct TestParams {
    /// `"tcp"` / `"udp"` / `"sctp"`: `true` for the protocol in use.
    pub protocol: Protocol,
    /// `"omit"` (`-O`): seconds at the start left out of the results.
    pub omit: u32,
    /// `"server_affinity"` (`-A n,m`): the CPU the server should pin to.
    pub server_affinity: Option<i32>,
    /// `"time"` (`-t`): seconds; 0 with `num` or `blockcount` set, or for an endless test.
    pub time: u32,
    /// `"num"` (`-n`): bytes to send; 0 for none.
    pub num: u64,
    /// `"blockcount"` (`-k`): blocks to send; 0 for none.
    pub blockcount: u64,
    /// `"MSS"` (`-M`): TCP maximum segment size; 0 for the system's.
    pub mss: u32,
    /// `"nodelay"` (`-N`): TCP_NODELAY on the data streams.
    pub nodelay: bool,
    /// `"parallel"` (`-P`): streams per direction.
    pub parallel: u32,
    /// `"reverse"` (`-R`): the server sends.
    pub reverse: bool,
    /// `"bidirectional"` (`--bidir`): both send, `parallel` streams each way.
    pub bidirectional: bool,
    /// `"mptcp"` (`-m`, 3.19+): multipath TCP.
    pub mptcp: bool,
    /// `"window"` (`-w`): socket buffer size; 0 for autotuning.
    pub window: u64,
    /// `"len"` (`-l`): bytes per write (per datagram for UDP).
    pub len: u32,
    /// `"bandwidth"` (`-b`): target bits per second per stream; 0 for unlimited.
    pub bandwidth: u64,
    /// `"fqrate"` (`--fq-rate`): SO_MAX_PACING_RATE in bits per second; 0 for none.
    pub fqrate: u64,
    /// `"pacing_timer"` (`--pacing-timer`): microseconds between rate checks.
    pub pacing_timer: u32,
    /// `"burst"` (`-b rate/burst`): packets per burst; 0 for none.
    pub burst: u32,
    /// `"gso"` (3.21, UDP, `--gsro`): 1 to send with UDP GSO.
    pub gso: u32,
    /// `"gso_dg_size"` (3.21, UDP): datagram size for GSO.
    pub gso_dg_size: u32,
    /// `"gso_bf_size"` (3.21, UDP): GSO buffer size.
    pub gso_bf_size: u32,
    /// `"gro"` (3.21, UDP, `--gsro`): 1 to receive with UDP GRO.
    pub gro: u32,
    /// `"gro_bf_size"` (3.21, UDP): GRO buffer size.
    pub gro_bf_size: u32,
    /// `"TOS"` (`-S`): IP type of service; 0 for none.
    pub tos: u32,
    /// `"flowlabel"` (`-L`): IPv6 flow label; 0 for none.
    pub flowlabel: u32,
    /// `"title"` (`-T`): a prefix for output lines.
    pub title: Option<String>,
    /// `"extra_data"` (`--extra-data`): a string carried into the JSON output.
    pub extra_data: Option<String>,
    /// `"congestion"` (`-C`): TCP congestion control algorithm to use.
    pub congestion: Option<String>,
    /// `"congestion_used"`: the algorithm the client's streams got (sent by some versions).
    pub congestion_used: Option<String>,
    /// `"get_server_output"` (`--get-server-output`): the server's output comes back in the
    /// results.
    pub get_server_output: bool,
    /// `"udp_counters_64bit"` (`--udp-counters-64bit`): 64-bit packet counters in datagrams.
    pub udp_counters_64bit: bool,
    /// `"repeating_payload"` (`--repeating-payload`): a repeating pattern, not random bytes.
    pub repeating_payload: bool,
    /// `"zerocopy"` (`-Z`, 3.10+ sends it): the sender uses sendfile(2); iperf3's value.
    pub zerocopy: i64,
    /// `"dont_fragment"` (`--dont-fragment`, 3.10+): set IP DF on UDP.
    pub dont_fragment: bool,
    /// `"authtoken"` (`--username`, needs OpenSSL): an RSA-encrypted credential.
    pub authtoken: Option<String>,
    /// `"skip_rx_copy"` (`--skip-rx-copy`, 3.19+): receive with MSG_TRUNC.
    pub skip_rx_copy: bool,
    /// `"client_version"` (3.1+): the client's version string, e.g. `"3.21"`.
    pub client_version: Option<String>,
    /// Keys this module does not know, kept as received (and sent again by
    /// [`TestParams::to_json`]).
    pub unknown: Map<String, Value>,
}

impl Default for TestParams {
    /// iperf3's `iperf_defaults` for the fields of the block.
    fn default() -> Self {
        TestParams {
            protocol: Protocol::Tcp,
            omit: 0,
            server_affinity: None,
            time: DEFAULT_TIME,
            num: 0,
            blockcount: 0,
            mss: 0,
            nodelay: false,
            parallel: 1,
            reverse: false,
            bidirectional: false,
            mptcp: false,
            window: 0,
            len: DEFAULT_TCP_LEN,
            bandwidth: 0,
            fqrate: 0,
            pacing_timer: DEFAULT_PACING_TIMER,
            burst: 0,
            gso: 0,
            gso_dg_size: 0,
            gso_bf_size: MAX_UDP_LEN,
            gro: 0,
            gro_bf_size: MAX_UDP_LEN,
            tos: 0,
            flowlabel: 0,
            title: None,
            extra_data: None,
            congestion: None,
            congestion_used: None,
            get_server_output: false,
            udp_counters_64bit: false,
            repeating_payload: false,
            zerocopy: 0,
            dont_fragment: false,
            authtoken: None,
            skip_rx_copy: false,
            client_version: None,
            unknown: Map::new(),
        }
    }
}

/// Every key [`TestParams`] reads.
pub const KNOWN_KEYS: &[&str] = &[
    "tcp",
    "udp",
    "sctp",
    "omit",
    "server_affinity",
    "time",
    "num",
    "blockcount",
    "MSS",
    "nodelay",
    "parallel",
    "reverse",
    "bidirectional",
    "mptcp",
    "window",
    "len",
    "bandwidth",
    "fqrate",
    "pacing_timer",
    "burst",
    "gso",
    "gso_dg_size",
    "gso_bf_size",
    "gro",
    "gro_bf_size",
    "TOS",
    "flowlabel",
    "title",
    "extra_data",
    "congestion",
    "congestion_used",
    "get_server_output",
    "udp_counters_64bit",
    "repeating_payload",
    "zerocopy",
    "dont_fragment",
    "authtoken",
    "skip_rx_copy",
    "client_version",
];

impl TestParams {
    /// Reads a parameter block: absent keys keep [`TestParams::default`], keys of the wrong
    /// type are ignored (as iperf3 3.18+ does), unknown keys are kept in `unknown`.
    pub fn from_json(value: &Value) -> Result<TestParams, ProtoError> {
        let obj = json::object(value)?;
        let mut p = TestParams {
            protocol: read_protocol(obj),
            ..TestParams::default()
        };
        p.read_numbers(obj)?;
        p.read_udp_offload(obj)?;
        p.read_flags(obj);
        p.read_strings(obj);
        p.unknown = obj
            .iter()
            .filter(|(k, _)| !KNOWN_KEYS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        Ok(p)
    }

    fn read_numbers(&mut self, obj: &Object) -> Result<(), ProtoError> {
        set(&mut self.omit, json::int_as(obj, "omit")?);
        self.server_affinity = json::int_as(obj, "server_affinity")?;
        set(&mut self.time, json::int_as(obj, "time")?);
        set(&mut self.num, json::int_as(obj, "num")?);
        set(&mut self.blockcount, json::int_as(obj, "blockcount")?);
        set(&mut self.mss, json::int_as(obj, "MSS")?);
        set(&mut self.parallel, json::int_as(obj, "parallel")?);
        set(&mut self.window, json::int_as(obj, "window")?);
        set(&mut self.len, json::int_as(obj, "len")?);
        set(&mut self.bandwidth, json::int_as(obj, "bandwidth")?);
        set(&mut self.fqrate, json::int_as(obj, "fqrate")?);
        set(&mut self.pacing_timer, json::int_as(obj, "pacing_timer")?);
        set(&mut self.burst, json::int_as(obj, "burst")?);
        set(&mut self.tos, json::int_as(obj, "TOS")?);
        set(&mut self.flowlabel, json::int_as(obj, "flowlabel")?);
        set(&mut self.zerocopy, json::int_as(obj, "zerocopy")?);
        Ok(())
    }

    fn read_udp_offload(&mut self, obj: &Object) -> Result<(), ProtoError> {
        set(&mut self.gso, json::int_as(obj, "gso")?);
        set(&mut self.gso_dg_size, json::int_as(obj, "gso_dg_size")?);
        set(&mut self.gso_bf_size, json::int_as(obj, "gso_bf_size")?);
        set(&mut self.gro, json::int_as(obj, "gro")?);
        set(&mut self.gro_bf_size, json::int_as(obj, "gro_bf_size")?);
        Ok(())
    }

    fn read_flags(&mut self, obj: &Object) {
        self.nodelay = json::flag(obj, "nodelay");
        self.reverse = json::flag(obj, "reverse");
        self.bidirectional = json::flag(obj, "bidirectional");
        self.mptcp = json::flag(obj, "mptcp");
        self.get_server_output = json::flag(obj, "get_server_output");
        self.udp_counters_64bit = json::flag(obj, "udp_counters_64bit");
        self.repeating_payload = json::flag(obj, "repeating_payload");
        self.dont_fragment = json::flag(obj, "dont_fragment");
        self.skip_rx_copy = json::flag(obj, "skip_rx_copy");
    }

    fn read_strings(&mut self, obj: &Object) {
        self.title = json::string(obj, "title");
        self.extra_data = json::string(obj, "extra_data");
        self.congestion = json::string(obj, "congestion");
        self.congestion_used = json::string(obj, "congestion_used");
        self.authtoken = json::string(obj, "authtoken");
        self.client_version = json::string(obj, "client_version");
    }

    /// The block as iperf3 3.21's `send_parameters` writes it: set options only, plus the keys
    /// it always writes, plus `unknown`.
    pub fn to_json(&self) -> Value {
        let mut o = Map::new();
        let key = match self.protocol {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        };
        o.insert(key.into(), true.into());
        o.insert("omit".into(), self.omit.into());
        if let Some(a) = self.server_affinity {
            o.insert("server_affinity".into(), a.into());
        }
        o.insert("time".into(), self.time.into());
        o.insert("num".into(), self.num.into());
        o.insert("blockcount".into(), self.blockcount.into());
        put_nonzero(&mut o, "MSS", self.mss.into());
        put_true(&mut o, "nodelay", self.nodelay);
        o.insert("parallel".into(), self.parallel.into());
        put_true(&mut o, "reverse", self.reverse);
        put_true(&mut o, "bidirectional", self.bidirectional);
        put_true(&mut o, "mptcp", self.mptcp);
        put_nonzero(&mut o, "window", self.window);
        put_nonzero(&mut o, "len", self.len.into());
        put_nonzero(&mut o, "bandwidth", self.bandwidth);
        put_nonzero(&mut o, "fqrate", self.fqrate);
        put_nonzero(&mut o, "pacing_timer", self.pacing_timer.into());
        put_nonzero(&mut o, "burst", self.burst.into());
        self.write_udp_offload(&mut o);
        put_nonzero(&mut o, "TOS", self.tos.into());
        put_nonzero(&mut o, "flowlabel", self.flowlabel.into());
        self.write_tail(&mut o);
        Value::Object(o)
    }

    fn write_udp_offload(&self, o: &mut Object) {
        if self.protocol == Protocol::Udp {
            o.insert("gso".into(), self.gso.into());
            o.insert("gso_dg_size".into(), self.gso_dg_size.into());
            o.insert("gso_bf_size".into(), self.gso_bf_size.into());
            o.insert("gro".into(), self.gro.into());
            o.insert("gro_bf_size".into(), self.gro_bf_size.into());
        }
    }

    fn write_tail(&self, o: &mut Object) {
        put_str(o, "title", &self.title);
        put_str(o, "extra_data", &self.extra_data);
        put_str(o, "congestion", &self.congestion);
        put_str(o, "congestion_used", &self.congestion_used);
        put_one(o, "get_server_output", self.get_server_output);
        put_one(o, "udp_counters_64bit", self.udp_counters_64bit);
        put_one(o, "repeating_payload", self.repeating_payload);
        if self.zerocopy != 0 {
            o.insert("zerocopy".into(), self.zerocopy.into());
        }
        put_one(o, "dont_fragment", self.dont_fragment);
        put_str(o, "authtoken", &self.authtoken);
        put_one(o, "skip_rx_copy", self.skip_rx_copy);
        put_str(o, "client_version", &self.client_version);
        for (k, v) in &self.unknown {
            o.entry(k.clone()).or_insert_with(|| v.clone());
        }
    }

    /// The block as a frame for the control connection; fails if it is over the 8 KiB an
    /// iperf3 server accepts (a long `title` or `extra_data`).
    pub fn to_frame(&self) -> Result<Vec<u8>, ProtoError> {
        encode_frame(&self.to_json(), MAX_PARAMS_LEN)
    }

    /// The block length a stream of this test writes: `len`, or iperf3's default for the
    /// protocol when `len` is 0.
    pub fn block_len(&self) -> u32 {
        match (self.len, self.protocol) {
            (0, Protocol::Udp) => DEFAULT_UDP_LEN,
            (0, Protocol::Sctp) => 64 * 1024,
            (0, Protocol::Tcp) => DEFAULT_TCP_LEN,
            (len, _) => len,
        }
    }

    /// How many data streams the test has: `parallel`, twice that with `--bidir`.
    pub fn stream_count(&self) -> usize {
        let n = self.parallel as usize;
        if self.bidirectional {
            n * 2
        } else {
            n
        }
    }

    /// Checks the block against iperf3's own limits (the ones its client enforces in
    /// `iperf_parse_arguments`, src/iperf_api.c), so that a server never builds a test an
    /// iperf3 client could not have asked for. Also refuses `parallel` 0.
    pub fn validate(&self) -> Result<(), ProtoError> {
        let checks: [(bool, ErrorCode, &str); 10] = [
            (
                self.reverse && self.bidirectional,
                ErrorCode::IEREVERSEBIDIR,
                "reverse and bidirectional",
            ),
            (
                self.parallel == 0 || self.parallel > MAX_STREAMS,
                ErrorCode::IENUMSTREAMS,
                "parallel",
            ),
            (self.time > MAX_TIME, ErrorCode::IEDURATION, "time"),
            (self.omit > MAX_OMIT, ErrorCode::IEOMIT, "omit"),
            (self.window > MAX_WINDOW, ErrorCode::IEBUFSIZE, "window"),
            (self.mss > MAX_MSS, ErrorCode::IEMSS, "MSS"),
            (self.burst > MAX_BURST, ErrorCode::IEBURST, "burst"),
            (self.tos > 255, ErrorCode::IEBADTOS, "TOS"),
            (
                self.protocol != Protocol::Udp && self.len > MAX_TCP_LEN,
                ErrorCode::IEBLOCKSIZE,
                "len",
            ),
            (
                self.protocol == Protocol::Udp
                    && (self.len < MIN_UDP_LEN || self.len > MAX_UDP_LEN),
                ErrorCode::IEUDPBLOCKSIZE,
                "len",
            ),
        ];
        match checks.iter().find(|(bad, _, _)| *bad) {
            Some((_, code, key)) => Err(ProtoError::ParamRejected {
                code: *code,
                detail: format!("parameter \"{key}\" out of range"),
            }),
            None => Ok(()),
        }
    }

    /// The options beyond a plain test that this block turns on, by their iperf3 keys.
    ///
    /// A plain test is: protocol TCP or UDP, `time`/`num`/`blockcount`, `parallel`, `reverse`,
    /// `bidirectional`, `len`, `bandwidth`, `omit`, `pacing_timer` at its default, and the
    /// informational `client_version`. Everything else a server must either do or refuse.
    pub fn options_in_use(&self) -> Vec<&'static str> {
        let on: [(&'static str, bool); 23] = [
            ("sctp", self.protocol == Protocol::Sctp),
            ("server_affinity", self.server_affinity.is_some()),
            ("MSS", self.mss != 0),
            ("nodelay", self.nodelay),
            ("mptcp", self.mptcp),
            ("window", self.window != 0),
            ("fqrate", self.fqrate != 0),
            ("pacing_timer", self.pacing_timer != DEFAULT_PACING_TIMER),
            ("burst", self.burst != 0),
            ("gso", self.gso != 0),
            ("gro", self.gro != 0),
            ("TOS", self.tos != 0),
            ("flowlabel", self.flowlabel != 0),
            ("title", self.title.is_some()),
            ("extra_data", self.extra_data.is_some()),
            ("congestion", self.congestion.is_some()),
            ("get_server_output", self.get_server_output),
            ("udp_counters_64bit", self.udp_counters_64bit),
            ("repeating_payload", self.repeating_payload),
            ("zerocopy", self.zerocopy != 0),
            ("dont_fragment", self.dont_fragment),
            ("authtoken", self.authtoken.is_some()),
            ("skip_rx_copy", self.skip_rx_copy),
        ];
        on.iter().filter(|(_, b)| *b).map(|(k, _)| *k).collect()
    }

    /// The options in use that are not in `supported`: what a server reports as unsupported.
    /// Unknown keys are not listed (iperf3 ignores them; see `unknown`).
    pub fn unsupported(&self, supported: &[&str]) -> Vec<&'static str> {
        self.options_in_use()
            .into_iter()
            .filter(|k| !supported.contains(k))
            .collect()
    }

    /// The error a server sends for `unsupported` options: `IEUNIMP`, with the keys for its
    /// own log line. `None` when all options in use are supported.
    pub fn reject_unsupported(&self, supported: &[&str]) -> Option<ProtoError> {
        let keys = self.unsupported(supported);
        (!keys.is_empty()).then(|| ProtoError::ParamRejected {
            code: ErrorCode::IEUNIMP,
            detail: format!(
                "client asked for options zcnet does not support: {}",
                keys.join(", ")
            ),
        })
    }
}

/// The protocol keys as `get_parameters` reads them: the last of tcp, udp, sctp that is set.
fn read_protocol(obj: &Object) -> Protocol {
    [
        ("tcp", Protocol::Tcp),
        ("udp", Protocol::Udp),
        ("sctp", Protocol::Sctp),
    ]
    .into_iter()
    .rfind(|(k, _)| json::flag(obj, k))
    .map_or(Protocol::Tcp, |(_, p)| p)
}

fn set<T>(field: &mut T, value: Option<T>) {
    if let Some(v) = value {
        *field = v;
    }
}

fn put_nonzero(o: &mut Object, key: &str, value: u64) {
    if value != 0 {
        o.insert(key.into(), value.into());
    }
}

fn put_true(o: &mut Object, key: &str, on: bool) {
    if on {
        o.insert(key.into(), true.into());
    }
}

fn put_one(o: &mut Object, key: &str, on: bool) {
    if on {
        o.insert(key.into(), 1.into());
    }
}

fn put_str(o: &mut Object, key: &str, value: &Option<String>) {
    if let Some(s) = value {
        o.insert(key.into(), s.clone().into());
    }
}
