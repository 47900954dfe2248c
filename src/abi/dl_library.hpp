// Loading a library a backend uses but never links (cuBLAS in the CUDA plugin, OpenBLAS in the
// CPU backend): dlopen by a list of names, dlsym a list of functions declared by its header.
//
//   #define MY_FUNCS(X) X(cblas_sgemm) X(cblas_dgemm)
//   struct my_api { void* lib = nullptr; MY_FUNCS(KILN_DL_MEMBER) };
//   api.lib = kiln_plugin::dl_open_first("MY_LIBRARY", {"libfoo.so.1", "libfoo.so"});
//   bool ok = api.lib != nullptr;
//   MY_FUNCS(KILN_DL_RESOLVE)  // needs `api` and `ok` in scope; ok turns false on a miss
#pragma once

#include <dlfcn.h>

#include <cstdlib>
#include <initializer_list>

namespace kiln_plugin {

// $env_var when set, else the first of names that loads; null when none does. RTLD_NODELETE:
// a library stays mapped until exit, so pointers into it never dangle.
inline void* dl_open_first(const char* env_var, std::initializer_list<const char*> names) {
  constexpr int flags = RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE;
  if (const char* env = std::getenv(env_var); env && *env)
    if (void* h = dlopen(env, flags)) return h;
  for (const char* name : names)
    if (void* h = dlopen(name, flags)) return h;
  return nullptr;
}

}  // namespace kiln_plugin

// A member typed as the header declares the function, named after it.
#define KILN_DL_MEMBER(name) decltype(&::name) name = nullptr;
#define KILN_DL_RESOLVE(name) \
  ok = ok && (api.name = reinterpret_cast<decltype(api.name)>(dlsym(api.lib, #name))) != nullptr;
