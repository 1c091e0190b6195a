# Argument checks the scripts share (sourced; set `me` to the script's name first). Each refusal
# is one line on stderr naming the flag (or variable) and what to give, and exit 2, as the zcnet
# command refuses bad arguments (docs/cli.md, "Exit codes").

# need_value FLAG ARGC: FLAG, the current argument, has a value after it ("$#" as ARGC).
need_value() {
  [ "$2" -ge 2 ] || { echo "$me: $1 wants a value (see --help)" >&2; exit 2; }
}

# need_int FLAG VALUE MIN [MAX]: a whole number from MIN (to MAX).
need_int() {
  local range="of at least $3"
  [ -n "${4:-}" ] && range="from $3 to $4"
  case $2 in
    '' | *[!0-9]*) echo "$me: $1 '$2': give a whole number $range" >&2; exit 2 ;;
  esac
  if [ "${#2}" -gt 9 ] || [ "$((10#$2))" -lt "$3" ] || { [ -n "${4:-}" ] && [ "$((10#$2))" -gt "$4" ]; }; then
    echo "$me: $1 $2: give a whole number $range" >&2
    exit 2
  fi
}

# need_seconds FLAG VALUE: a number of seconds above 0 (a fraction allowed: 0.5).
need_seconds() {
  if ! [[ $2 =~ ^[0-9]{1,9}(\.[0-9]+)?$ ]] || [[ $2 =~ ^0*(\.0*)?$ ]]; then
    echo "$me: $1 '$2': give a number of seconds above 0" >&2
    exit 2
  fi
}

# need_size FLAG VALUE: bytes above 0, with an optional K, M or G (4096, 64K, 1M).
need_size() {
  if ! [[ $2 =~ ^[0-9]{1,9}[KMG]?$ ]] || [[ $2 =~ ^0+[KMG]?$ ]]; then
    echo "$me: $1 '$2': give a size in bytes above 0, e.g. 4096, 64K or 1M" >&2
    exit 2
  fi
}

# need_one_of FLAG VALUE CHOICE...: one of the choices.
need_one_of() {
  local flag=$1 v=$2 c
  shift 2
  for c in "$@"; do [ "$v" = "$c" ] && return 0; done
  echo "$me: $flag '$v': use one of: $*" >&2
  exit 2
}
