# A private apt (sourced): its own sources list, lists and cache under one directory, through
# APT_CONFIG, so the system's /etc/apt is never touched and Debian's keyring checks the index.
# Used by the scripts that fetch pinned Debian packages or sources (kernel-lab.sh, kmod-build.sh,
# kmod-proof.sh, send-tax.sh).

# apt_private DIR LINE...: makes DIR afresh with sources.list holding the LINEs ("deb [signed-by=…]
# MIRROR SUITE main", "deb-src …") and DIR/apt.conf; run apt as `APT_CONFIG=DIR/apt.conf apt-get …`.
# Fails (status 1) when DIR cannot be written.
apt_private() {
  local dir=$1
  shift
  rm -rf "$dir"
  mkdir -p "$dir/lists/partial" "$dir/archives/partial" "$dir/parts" "$dir/prefs.d" || return 1
  printf '%s\n' "$@" >"$dir/sources.list" || return 1
  : >"$dir/preferences"
  cat >"$dir/apt.conf" <<CONF
Dir::Etc::SourceList "$dir/sources.list";
Dir::Etc::SourceParts "$dir/parts";
Dir::Etc::Preferences "$dir/preferences";
Dir::Etc::PreferencesParts "$dir/prefs.d";
Dir::State::Lists "$dir/lists";
Dir::State::status "/dev/null";
Dir::Cache "$dir/cache";
Dir::Cache::Archives "$dir/archives";
Acquire::Languages "none";
APT::Architecture "amd64";
APT::Sandbox::User "root";
Acquire::Retries "1";
Acquire::http::Timeout "30";
CONF
}
