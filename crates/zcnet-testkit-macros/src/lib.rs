//! `#[zcnet_testkit::test]`: registers a test function with zcnet's harness (see the
//! `zcnet-testkit` crate). It reads only what it needs from the tokens — the function's name,
//! an optional `timeout = SECONDS` argument, and an `#[ignore]` or `#[ignore = "why"]`
//! attribute on the function — so it needs no parser crate.

use proc_macro::{Delimiter, Group, Ident, Literal, Span, TokenStream, TokenTree};

/// Marks a function as a test of zcnet's harness. `#[zcnet_testkit::test(timeout = 600)]`
/// sets its time limit in seconds (default: the harness's); an `#[ignore = "why"]` under it
/// keeps it out of normal runs, as libtest's does.
#[proc_macro_attribute]
pub fn test(attr: TokenStream, item: TokenStream) -> TokenStream {
    match expand(attr, item) {
        Ok(ts) => ts,
        Err(msg) => compile_error(&msg),
    }
}

fn expand(attr: TokenStream, item: TokenStream) -> Result<TokenStream, String> {
    let timeout = parse_timeout(attr)?;
    let mut kept: Vec<TokenTree> = Vec::new();
    let mut ignore: Option<String> = None;
    let mut name: Option<Ident> = None;
    let mut iter = item.into_iter().peekable();
    while let Some(tt) = iter.next() {
        // An outer attribute is `#` followed by a bracketed group.
        if let TokenTree::Punct(p) = &tt {
            if p.as_char() == '#' && name.is_none() {
                if let Some(TokenTree::Group(g)) = iter.peek() {
                    if g.delimiter() == Delimiter::Bracket {
                        if let Some(reason) = ignore_attr(g) {
                            ignore = Some(reason);
                            iter.next();
                            continue;
                        }
                    }
                }
            }
        }
        if let TokenTree::Ident(id) = &tt {
            if name.is_none() && id.to_string() == "fn" {
                kept.push(tt.clone());
                match iter.next() {
                    Some(TokenTree::Ident(n)) => {
                        name = Some(n.clone());
                        kept.push(TokenTree::Ident(n));
                    }
                    _ => return Err("#[zcnet_testkit::test] goes on a function".into()),
                }
                continue;
            }
        }
        kept.push(tt);
    }
    let name = name.ok_or("#[zcnet_testkit::test] goes on a function")?;
    let ignored = match &ignore {
        None => "::core::option::Option::None".to_string(),
        Some(r) => format!("::core::option::Option::Some({})", Literal::string(r)),
    };
    let timeout = match timeout {
        None => "::core::option::Option::None".to_string(),
        Some(t) => format!("::core::option::Option::Some({t}u64)"),
    };
    let register = format!(
        "::zcnet_testkit::inventory::submit! {{
            ::zcnet_testkit::Test {{
                name: {name_lit},
                module: ::core::module_path!(),
                timeout_s: {timeout},
                ignored: {ignored},
                run: {{
                    fn __zcnet_testkit_run() -> ::core::result::Result<(), ::std::string::String> {{
                        ::zcnet_testkit::TestResult::into_result({name}())
                    }}
                    __zcnet_testkit_run
                }},
            }}
        }}",
        name_lit = Literal::string(&name.to_string()),
    );
    let mut out: TokenStream = kept.into_iter().collect();
    out.extend(
        register
            .parse::<TokenStream>()
            .map_err(|e| format!("zcnet_testkit: {e}"))?,
    );
    Ok(out)
}

/// `timeout = N` (seconds), or nothing.
fn parse_timeout(attr: TokenStream) -> Result<Option<u64>, String> {
    let toks: Vec<TokenTree> = attr.into_iter().collect();
    match toks.as_slice() {
        [] => Ok(None),
        [TokenTree::Ident(k), TokenTree::Punct(eq), TokenTree::Literal(v)]
            if k.to_string() == "timeout" && eq.as_char() == '=' =>
        {
            let v = v.to_string().replace('_', "");
            v.parse::<u64>()
                .ok()
                .filter(|&s| s > 0)
                .map(Some)
                .ok_or_else(|| format!("timeout = {v}: give whole seconds above 0"))
        }
        _ => Err("#[zcnet_testkit::test] takes nothing or `timeout = SECONDS`".into()),
    }
}

/// `Some(reason)` when the bracketed attribute is `ignore` or `ignore = "reason"`.
fn ignore_attr(g: &Group) -> Option<String> {
    let toks: Vec<TokenTree> = g.stream().into_iter().collect();
    match toks.as_slice() {
        [TokenTree::Ident(i)] if i.to_string() == "ignore" => Some(String::new()),
        [TokenTree::Ident(i), TokenTree::Punct(eq), TokenTree::Literal(l)]
            if i.to_string() == "ignore" && eq.as_char() == '=' =>
        {
            let s = l.to_string();
            Some(
                s.strip_prefix('"')
                    .and_then(|s| s.strip_suffix('"'))
                    .unwrap_or(&s)
                    .to_string(),
            )
        }
        _ => None,
    }
}

fn compile_error(msg: &str) -> TokenStream {
    let mut ts: TokenStream = "::core::compile_error!".parse().unwrap_or_default();
    let lit = TokenTree::Literal(Literal::string(msg));
    let mut g = Group::new(Delimiter::Parenthesis, lit.into());
    g.set_span(Span::call_site());
    ts.extend([TokenTree::Group(g)]);
    ts.extend(";".parse::<TokenStream>().unwrap_or_default());
    ts
}
