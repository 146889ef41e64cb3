//! Whose a tenant's ClickHouse user and database are, decided before any statement changes them.
//!
//! Names alone prove nothing: `tenant_acme` may be another install's tenant `acme` sharing the server,
//! or a database made by hand. An object is this Tenant's when
//! - it carries this Tenant's owner mark (its role, see [`Owner`]), or
//! - it carries no mark of another Tenant and this Tenant proves it by what only it has: its status
//!   records the database as provisioned (the provisioner writes that only after it made it — tenants
//!   provisioned before marks existed are recognised so, and marked at their next run), or the
//!   password in its own credentials Secret logs in as the user (a run cut short between creating the
//!   user and marking it). A database with no mark is proven by its user.
//!
//! A mark of a deleted Tenant of the same namespace and name (the Tenant this one re-created) is no
//! other owner: only this install could have made it, and this Tenant holds that Tenant's retained
//! credentials Secret (adopted) — proof enough even while the retained user's logins are locked. The
//! objects are marked as this Tenant's, and the old mark goes.

use super::sql::{Owner, TenantIdents};
use crate::crd::Tenant;

/// What ClickHouse holds under one of the tenant's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Found {
    Absent,
    /// Exists, with the owners its marks name (none: unmarked).
    Present(Vec<Owner>),
}

/// Whose an object is, for this Tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing there: this Tenant may create it.
    Free,
    /// This Tenant's, carrying its mark already or not (`marked`); `predecessors` are marks of deleted
    /// Tenants of its name to drop once it is marked.
    Ours {
        marked: bool,
        predecessors: Vec<Owner>,
    },
    /// Marked as another Tenant's.
    Foreign(Owner),
    /// There, unmarked (or marked only by a predecessor), and nothing of this Tenant's proves it.
    Unproven,
}

impl Verdict {
    pub fn is_ours(&self) -> bool {
        matches!(self, Self::Ours { .. })
    }

    /// This Tenant's, but without its mark yet.
    pub fn needs_mark(&self) -> bool {
        matches!(self, Self::Ours { marked: false, .. })
    }

    pub fn predecessors(&self) -> &[Owner] {
        match self {
            Self::Ours { predecessors, .. } => predecessors,
            _ => &[],
        }
    }
}

/// The tenant that asks (its names and their owner, `ids.owner`), and what it can prove.
pub struct Claimant<'a> {
    pub tenant: &'a Tenant,
    pub ids: &'a TenantIdents,
}

impl Claimant<'_> {
    fn owner(&self) -> &Owner {
        &self.ids.owner
    }

    /// Its status records the database as provisioned.
    fn recorded(&self) -> bool {
        self.tenant
            .status
            .as_ref()
            .and_then(|s| s.click_house_database_name.as_deref())
            == Some(self.ids.database.as_str())
    }

    /// The verdict on the user; `logs_in` whether the password on file logs in as it (asked only
    /// when it decides); `has_secret` whether the tenant has a credentials Secret of its own.
    pub fn user(&self, found: &Found, logs_in: bool, has_secret: bool) -> Verdict {
        self.judge(found, has_secret, || self.recorded() || logs_in)
    }

    /// The verdict on the database, given the user's: an unmarked database is proven by its user.
    pub fn database(&self, found: &Found, user: &Verdict, has_secret: bool) -> Verdict {
        self.judge(found, has_secret, || self.recorded() || user.is_ours())
    }

    fn judge(&self, found: &Found, has_secret: bool, proven: impl FnOnce() -> bool) -> Verdict {
        let Found::Present(marks) = found else {
            return Verdict::Free;
        };
        if marks.contains(self.owner()) {
            return Verdict::Ours {
                marked: true,
                predecessors: self.predecessors(marks),
            };
        }
        if let Some(other) = marks.iter().find(|m| !self.is_predecessor(m)) {
            return Verdict::Foreign(other.clone());
        }
        let predecessor_only = !marks.is_empty();
        if predecessor_only && has_secret || proven() {
            Verdict::Ours {
                marked: false,
                predecessors: self.predecessors(marks),
            }
        } else {
            Verdict::Unproven
        }
    }

    /// A deleted Tenant this one re-created: same namespace and name, another uid.
    fn is_predecessor(&self, mark: &Owner) -> bool {
        let me = self.owner();
        mark.namespace == me.namespace && mark.tenant == me.tenant && mark.uid != me.uid
    }

    fn predecessors(&self, marks: &[Owner]) -> Vec<Owner> {
        marks
            .iter()
            .filter(|m| self.is_predecessor(m))
            .cloned()
            .collect()
    }
}

/// The owners named by a list of role names (one a line, as ClickHouse answers): roles that are not
/// owner marks are no one's.
pub fn owners_in(answer: &str) -> Vec<Owner> {
    answer
        .lines()
        .filter_map(|role| Owner::from_role(role.trim()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::{TenantSpec, TenantStatus};
    use crate::names::TenantName;

    fn owner(namespace: &str, tenant: &str, uid: &str) -> Owner {
        Owner {
            namespace: namespace.into(),
            tenant: tenant.into(),
            uid: uid.into(),
        }
    }

    fn tenant(recorded_database: Option<&str>) -> Tenant {
        let mut t = Tenant::new("acme", TenantSpec::default());
        t.status = Some(TenantStatus {
            click_house_database_name: recorded_database.map(str::to_owned),
            ..TenantStatus::default()
        });
        t
    }

    /// The verdicts on the user and the database for `me`, from what ClickHouse holds.
    fn judge(t: &Tenant, user: Found, db: Found, logs_in: bool) -> (Verdict, Verdict) {
        let me = owner("team-a", "acme", "1111");
        let ids = TenantIdents::for_tenant(&TenantName::parse("acme").unwrap(), "tenant_acme", &me)
            .unwrap();
        let c = Claimant {
            tenant: t,
            ids: &ids,
        };
        let u = c.user(&user, logs_in, logs_in);
        let d = c.database(&db, &u, logs_in);
        (u, d)
    }

    fn marked(by: &[Owner]) -> Found {
        Found::Present(by.to_vec())
    }

    #[test]
    fn nothing_there_is_free_and_this_tenants_mark_is_proof() {
        let me = owner("team-a", "acme", "1111");
        let t = tenant(None);
        assert_eq!(
            judge(&t, Found::Absent, Found::Absent, false),
            (Verdict::Free, Verdict::Free)
        );
        let ours = Verdict::Ours {
            marked: true,
            predecessors: vec![],
        };
        assert_eq!(
            judge(&t, marked(std::slice::from_ref(&me)), marked(&[me]), false),
            (ours.clone(), ours)
        );
    }

    #[test]
    fn another_tenants_mark_is_never_overruled_by_a_login_or_a_record() {
        let theirs = owner("team-b", "acme", "2222");
        let t = tenant(Some("tenant_acme"));
        assert_eq!(
            judge(
                &t,
                marked(std::slice::from_ref(&theirs)),
                marked(std::slice::from_ref(&theirs)),
                true
            ),
            (
                Verdict::Foreign(theirs.clone()),
                Verdict::Foreign(theirs.clone())
            )
        );
        // Another tenant name in the same namespace is another owner too.
        let sibling = owner("team-a", "acme-two", "3333");
        assert_eq!(
            judge(
                &t,
                marked(std::slice::from_ref(&sibling)),
                Found::Absent,
                true
            )
            .0,
            Verdict::Foreign(sibling)
        );
    }

    #[test]
    fn an_unmarked_object_is_proven_by_a_login_or_the_status_record_and_nothing_else() {
        let unmarked = || marked(&[]);
        // Made by hand (or by another install before marks existed): nothing proves it.
        assert_eq!(
            judge(&tenant(None), unmarked(), unmarked(), false),
            (Verdict::Unproven, Verdict::Unproven)
        );
        // A database made by hand, the user still to be made: the database is not this tenant's.
        assert_eq!(
            judge(&tenant(None), Found::Absent, unmarked(), false),
            (Verdict::Free, Verdict::Unproven)
        );
        let ours_unmarked = Verdict::Ours {
            marked: false,
            predecessors: vec![],
        };
        // The password in the tenant's own Secret logs in: its user, and so its database.
        assert_eq!(
            judge(&tenant(None), unmarked(), unmarked(), true),
            (ours_unmarked.clone(), ours_unmarked.clone())
        );
        // Provisioned before marks existed: its status records the database.
        assert_eq!(
            judge(&tenant(Some("tenant_acme")), unmarked(), unmarked(), false),
            (ours_unmarked.clone(), ours_unmarked)
        );
        // A record of another database proves nothing about this one.
        assert_eq!(
            judge(&tenant(Some("tenant_other")), unmarked(), unmarked(), false),
            (Verdict::Unproven, Verdict::Unproven)
        );
    }

    #[test]
    fn a_deleted_tenant_of_the_same_name_is_a_predecessor_whose_mark_goes_once_proven() {
        let before = owner("team-a", "acme", "0000");
        let (user, db) = judge(
            &tenant(None),
            marked(std::slice::from_ref(&before)),
            marked(std::slice::from_ref(&before)),
            true,
        );
        let adopted = Verdict::Ours {
            marked: false,
            predecessors: vec![before.clone()],
        };
        assert_eq!((user.clone(), db), (adopted.clone(), adopted));
        assert!(user.needs_mark());
        assert_eq!(user.predecessors(), std::slice::from_ref(&before));
        // Without the retained credentials Secret, a predecessor's objects are not taken over.
        assert_eq!(
            judge(
                &tenant(None),
                marked(std::slice::from_ref(&before)),
                Found::Absent,
                false
            )
            .0,
            Verdict::Unproven
        );
    }

    #[test]
    fn only_owner_roles_in_an_answer_name_owners() {
        assert_eq!(
            owners_in(
                "readonly\nsentry-tenants/team-a/acme/1111\n\nsentry-tenants/bad\nsentry-tenants/team-b/acme/2222\n"
            ),
            [
                owner("team-a", "acme", "1111"),
                owner("team-b", "acme", "2222")
            ]
        );
        assert!(owners_in("").is_empty());
    }
}
