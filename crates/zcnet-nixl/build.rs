//! Builds the C++ half of the plugin (cxx/engine.cpp: NIXL's backend class and plugin struct,
//! declared in cxx/nixl_abi.hpp) into a static library linked into libplugin_ZCNET.so.

fn main() {
    println!("cargo:rerun-if-changed=cxx/engine.cpp");
    println!("cargo:rerun-if-changed=cxx/nixl_abi.hpp");
    cc::Build::new()
        .cpp(true)
        .file("cxx/engine.cpp")
        // NIXL's core is C++20 (backend_plugin.h:29-30); std::optional in the vtable's
        // queryMem slot needs 17 at least. The libstdc++ ABI must be the new (cxx11) one, as
        // the wheel's (its symbols are std::__cxx11::basic_string).
        .std("c++17")
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .flag_if_supported("-fvisibility=hidden")
        .warnings(true)
        .extra_warnings(true)
        .flag_if_supported("-Wno-unused-parameter")
        .compile("zcnet_nixl_cxx");
}
