// Placeholder until the dead-letter length setting lands (streams.dead_letter_max_len).
extension Settings {
    var deadLetterMaxLength: Int { 100_000 }
}
