// Filled in by its owner this session.
#pragma once
