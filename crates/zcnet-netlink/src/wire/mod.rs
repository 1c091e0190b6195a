//! The netlink wire format as pure functions over bytes: attributes ([`Attrs`], [`Attr`]),
//! the request builder ([`MsgBuilder`]), messages, errors and extended ACKs ([`messages`],
//! [`parse_error`], [`Extack`]). Everything here works on byte slices and never panics on
//! odd input.

mod attr;
mod builder;
mod msg;

pub(crate) use attr::malformed;
pub use attr::{
    align4, attr_path_at, Attr, Attrs, NLA_F_NESTED, NLA_F_NET_BYTEORDER, NLA_HDRLEN, NLA_TYPE_MASK,
};
pub use builder::MsgBuilder;
pub use msg::{
    messages, parse_done, parse_error, split_genl, ErrorMsg, Extack, GenlHdr, Messages, Msg,
    NlMsgHdr, GENL_HDRLEN, NLMSGERR_ATTR_COOKIE, NLMSGERR_ATTR_MISS_NEST, NLMSGERR_ATTR_MISS_TYPE,
    NLMSGERR_ATTR_MSG, NLMSGERR_ATTR_OFFS, NLMSGERR_ATTR_POLICY, NLMSG_DONE, NLMSG_ERROR,
    NLMSG_HDRLEN, NLMSG_MIN_TYPE, NLMSG_NOOP, NLMSG_OVERRUN, NLM_F_ACK, NLM_F_ACK_TLVS,
    NLM_F_CAPPED, NLM_F_DUMP, NLM_F_DUMP_INTR, NLM_F_MULTI, NLM_F_REQUEST,
};
