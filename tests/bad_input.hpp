// Shared check of the bad_input tests (tests/*/bad_input_test.cpp): f must throw exactly E (or a
// subclass) with a message holding every one of parts. Another exception type, another message,
// or nothing thrown is a failure that says what happened instead.
#pragma once

#include <gtest/gtest.h>

#include <exception>
#include <initializer_list>
#include <kiln/error.hpp>
#include <string>
#include <typeinfo>

namespace bad_input {

template <class E, class F>
::testing::AssertionResult throws(F&& f, std::initializer_list<std::string> parts) {
  try {
    f();
  } catch (const std::exception& any) {
    const std::string m = any.what();
    if (dynamic_cast<const E*>(&any) == nullptr) {
      const auto* k = dynamic_cast<const kiln::error*>(&any);
      return ::testing::AssertionFailure()
             << "expected " << typeid(E).name() << ", got "
             << (k ? std::string("kiln::") + kiln::to_string(k->category())
                   : "a non-kiln exception")
             << ": " << m;
    }
    for (const std::string& p : parts)
      if (m.find(p) == std::string::npos)
        return ::testing::AssertionFailure() << "message \"" << m << "\" lacks \"" << p << "\"";
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "expected " << typeid(E).name() << ", nothing thrown";
}

}  // namespace bad_input
