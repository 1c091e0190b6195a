//! Resolving a generic netlink family by name through the controller (`nlctrl`,
//! `CTRL_CMD_GETFAMILY`, include/uapi/linux/genetlink.h).

use crate::conn::{GenlConn, Op};
use crate::error::{Error, Result};
use crate::wire::{Attrs, MsgBuilder};

/// `GENL_ID_CTRL`: the controller's fixed family id (`NLMSG_MIN_TYPE`).
pub const GENL_ID_CTRL: u16 = 0x10;
/// `CTRL_CMD_GETFAMILY`.
pub const CTRL_CMD_GETFAMILY: u8 = 3;
/// `CTRL_ATTR_FAMILY_ID` (u16).
pub const CTRL_ATTR_FAMILY_ID: u16 = 1;
/// `CTRL_ATTR_FAMILY_NAME` (string).
pub const CTRL_ATTR_FAMILY_NAME: u16 = 2;
/// `CTRL_ATTR_VERSION` (u32).
pub const CTRL_ATTR_VERSION: u16 = 3;
/// `CTRL_ATTR_HDRSIZE` (u32).
pub const CTRL_ATTR_HDRSIZE: u16 = 4;
/// `CTRL_ATTR_MAXATTR` (u32).
pub const CTRL_ATTR_MAXATTR: u16 = 5;
/// `CTRL_ATTR_OPS`: nest of nests, one per operation.
pub const CTRL_ATTR_OPS: u16 = 6;
/// `CTRL_ATTR_MCAST_GROUPS`: nest of nests, one per multicast group.
pub const CTRL_ATTR_MCAST_GROUPS: u16 = 7;
/// `CTRL_ATTR_OP_ID` (u32), inside an `CTRL_ATTR_OPS` entry.
pub const CTRL_ATTR_OP_ID: u16 = 1;
/// `CTRL_ATTR_OP_FLAGS` (u32: `GENL_ADMIN_PERM`, `GENL_CMD_CAP_DO`, ...).
pub const CTRL_ATTR_OP_FLAGS: u16 = 2;
/// `CTRL_ATTR_MCAST_GRP_NAME` (string).
pub const CTRL_ATTR_MCAST_GRP_NAME: u16 = 1;
/// `CTRL_ATTR_MCAST_GRP_ID` (u32).
pub const CTRL_ATTR_MCAST_GRP_ID: u16 = 2;

/// `GENL_ADMIN_PERM`: the operation needs CAP_NET_ADMIN.
pub const GENL_ADMIN_PERM: u32 = 0x01;
/// `GENL_CMD_CAP_DO`: the operation has a `do` handler.
pub const GENL_CMD_CAP_DO: u32 = 0x02;
/// `GENL_CMD_CAP_DUMP`: the operation has a `dump` handler.
pub const GENL_CMD_CAP_DUMP: u32 = 0x04;
/// `GENL_UNS_ADMIN_PERM`: needs CAP_NET_ADMIN in the user namespace of the netns.
pub const GENL_UNS_ADMIN_PERM: u32 = 0x10;

/// One operation a family offers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FamilyOp {
    /// The command number.
    pub id: u32,
    /// `GENL_*` flags.
    pub flags: u32,
}

impl FamilyOp {
    /// Has a `do` handler.
    pub fn can_do(&self) -> bool {
        self.flags & GENL_CMD_CAP_DO != 0
    }
    /// Has a `dump` handler.
    pub fn can_dump(&self) -> bool {
        self.flags & GENL_CMD_CAP_DUMP != 0
    }
    /// Needs CAP_NET_ADMIN.
    pub fn admin(&self) -> bool {
        self.flags & (GENL_ADMIN_PERM | GENL_UNS_ADMIN_PERM) != 0
    }
}

/// A multicast group of a family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McastGroup {
    /// Group name, e.g. `"mgmt"`.
    pub name: String,
    /// Group id, for `NETLINK_ADD_MEMBERSHIP`.
    pub id: u32,
}

/// What the controller says about a family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    /// Family name.
    pub name: String,
    /// Family id: the `nlmsg_type` of its messages (assigned at boot).
    pub id: u16,
    /// Family version.
    pub version: u32,
    /// Size of the family's own header after `genlmsghdr` (0 for netdev and ethtool).
    pub hdrsize: u32,
    /// Highest attribute type.
    pub maxattr: u32,
    /// The operations, in the kernel's order.
    pub ops: Vec<FamilyOp>,
    /// The multicast groups.
    pub mcast_groups: Vec<McastGroup>,
}

impl Family {
    /// Parses a `CTRL_CMD_NEWFAMILY` reply (the attributes after the genl header). Unknown
    /// attributes are ignored.
    pub fn parse(attrs: &[u8]) -> Result<Family> {
        let mut f = Family {
            name: String::new(),
            id: 0,
            version: 0,
            hdrsize: 0,
            maxattr: 0,
            ops: Vec::new(),
            mcast_groups: Vec::new(),
        };
        let mut have_id = false;
        for a in Attrs::new(attrs) {
            let a = a?;
            match a.kind() {
                CTRL_ATTR_FAMILY_ID => {
                    f.id = a.u16()?;
                    have_id = true;
                }
                CTRL_ATTR_FAMILY_NAME => f.name = a.str(),
                CTRL_ATTR_VERSION => f.version = a.u32()?,
                CTRL_ATTR_HDRSIZE => f.hdrsize = a.u32()?,
                CTRL_ATTR_MAXATTR => f.maxattr = a.u32()?,
                CTRL_ATTR_OPS => {
                    for entry in a.nested() {
                        let mut op = FamilyOp { id: 0, flags: 0 };
                        for x in entry?.nested() {
                            let x = x?;
                            match x.kind() {
                                CTRL_ATTR_OP_ID => op.id = x.u32()?,
                                CTRL_ATTR_OP_FLAGS => op.flags = x.u32()?,
                                _ => {}
                            }
                        }
                        f.ops.push(op);
                    }
                }
                CTRL_ATTR_MCAST_GROUPS => {
                    for entry in a.nested() {
                        let mut g = McastGroup {
                            name: String::new(),
                            id: 0,
                        };
                        for x in entry?.nested() {
                            let x = x?;
                            match x.kind() {
                                CTRL_ATTR_MCAST_GRP_NAME => g.name = x.str(),
                                CTRL_ATTR_MCAST_GRP_ID => g.id = x.u32()?,
                                _ => {}
                            }
                        }
                        f.mcast_groups.push(g);
                    }
                }
                _ => {}
            }
        }
        if !have_id {
            return Err(crate::wire::malformed(
                "family reply without CTRL_ATTR_FAMILY_ID",
            ));
        }
        Ok(f)
    }

    /// The operation with command number `cmd`, if the family has it.
    pub fn op(&self, cmd: u8) -> Option<FamilyOp> {
        self.ops.iter().copied().find(|o| o.id == u32::from(cmd))
    }

    /// Whether the family offers command `cmd`.
    pub fn has_op(&self, cmd: u8) -> bool {
        self.op(cmd).is_some()
    }

    /// Fails with [`Error::OpMissing`] unless the family offers `op`.
    pub(crate) fn require(&self, op: Op) -> Result<()> {
        if self.has_op(op.cmd) {
            Ok(())
        } else {
            Err(Error::OpMissing {
                family: self.name.clone(),
                op: op.name,
                needs: op.needs,
            })
        }
    }

    /// The family version as the one byte the genl header carries.
    pub(crate) fn version_u8(&self) -> u8 {
        u8::try_from(self.version).unwrap_or(u8::MAX)
    }
}

fn ctrl_attr_name(path: &[u16]) -> Option<&'static str> {
    match path {
        [CTRL_ATTR_FAMILY_ID] => Some("family-id"),
        [CTRL_ATTR_FAMILY_NAME] => Some("family-name"),
        _ => None,
    }
}

/// The `getfamily` operation of the controller.
pub const GETFAMILY: Op = Op {
    name: "getfamily",
    cmd: CTRL_CMD_GETFAMILY,
    needs: "Linux 2.6.15",
    attr_name: ctrl_attr_name,
};

/// The controller answers `ENOENT` for a family the kernel lacks: that becomes
/// [`Error::FamilyMissing`]; other errors pass through.
pub fn family_error(name: &str, needs: &'static str, e: Error) -> Error {
    match e.errno() {
        Some(libc::ENOENT) => Error::FamilyMissing {
            family: name.to_string(),
            needs,
        },
        _ => e,
    }
}

/// Resolves `name` over `conn`; `needs` names the kernel that introduced the family, for the
/// error when it is missing (the controller answers `ENOENT`).
pub(crate) fn resolve_on(conn: &mut GenlConn, name: &str, needs: &'static str) -> Result<Family> {
    let replies = conn
        .exchange(GENL_ID_CTRL, 2, GETFAMILY, name, false, &|b| {
            b.put_str(CTRL_ATTR_FAMILY_NAME, name);
        })
        .map_err(|e| family_error(name, needs, e))?;
    let r = replies.first().ok_or_else(|| Error::Malformed {
        context: "getfamily".into(),
        what: format!("no reply for family {name}"),
    })?;
    Family::parse(&r.attrs).map_err(|e| e.in_context("getfamily"))
}

/// Resolves a family by name on a fresh socket.
pub fn resolve(name: &str) -> Result<Family> {
    let mut conn = GenlConn::open()?;
    resolve_on(&mut conn, name, "a kernel that has it")
}

impl GenlConn {
    /// Checks that `family` offers `op`, exchanges the request, and returns each reply's
    /// attributes (shared by the netdev and ethtool clients).
    pub(crate) fn request(
        &mut self,
        family: &Family,
        op: Op,
        target: &str,
        dump: bool,
        build: &dyn Fn(&mut MsgBuilder),
    ) -> Result<Vec<Vec<u8>>> {
        family.require(op)?;
        let replies = self.exchange(family.id, family.version_u8(), op, target, dump, build)?;
        Ok(replies.into_iter().map(|r| r.attrs).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::Capture;

    #[zcnet_testkit::test]
    fn missing_family_says_which_kernel_has_it() {
        let e = Capture::load("ctrl_getfamily_missing")
            .replay(GETFAMILY, "zcnet-nope")
            .unwrap_err();
        assert_eq!(e.errno(), Some(libc::ENOENT));
        let e = family_error("netdev", "Linux 6.3 or newer", e);
        assert_eq!(
            e.to_string(),
            "the kernel has no `netdev` generic netlink family: needs Linux 6.3 or newer"
        );
    }
}
