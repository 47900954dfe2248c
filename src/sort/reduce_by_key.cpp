// Filled in by its owner this session (see the header).
