import ActivityCastSettings
import Foundation

/// Aligned columns for the terminal (`inspect`, `trace`, `deadletters`).
public enum TextTable {
    /// Columns padded to their widest cell. Cells must already be escaped and cut: every cell is
    /// padded to the widest one in its column, so one long cell would be multiplied by the rows
    /// (a 100 KB consumer name made every consumer row 100 KB wide). The last column is not padded.
    /// At most `limit` rows after the header; then a line says how many more and where (`more`).
    public static func render(_ rows: [[String]], limit: Int, more: String) -> String {
        guard let header = rows.first else { return "" }
        if rows.count == 1 { return "  (none)\n" }
        let shown = rows.prefix(limit + 1)
        // Widths in Unicode scalars, the unit the cells were cut in.
        var widths = header.map { _ in 0 }
        for row in shown { for (i, cell) in row.enumerated() where i < widths.count { widths[i] = max(widths[i], cell.unicodeScalars.count) } }
        var out = ""
        for row in shown {
            var line = " "
            for (i, cell) in row.enumerated() {
                line += " " + cell
                if i < row.count - 1, i < widths.count { line += String(repeating: " ", count: widths[i] - cell.unicodeScalars.count + 1) }
            }
            while line.hasSuffix(" ") { line.removeLast() }
            out += line + "\n"
        }
        if rows.count > shown.count { out += "  … and \(rows.count - shown.count) more (\(more))\n" }
        return out
    }
}

/// JSON for the terminal and for scripts (sorted keys, indented). JSON already escapes C0
/// controls in strings; DEL, C1 controls and the invisible formatting characters are escaped here
/// as well (`\u009b`), which JSON allows for any character, so no byte of the output can steer a
/// terminal.
public enum SafeJSON {
    public static func encode(_ value: some Encodable) throws -> String {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.prettyPrinted, .sortedKeys]
        let text = String(decoding: try encoder.encode(value), as: UTF8.self)
        var out = ""
        out.unicodeScalars.reserveCapacity(text.unicodeScalars.count)
        for scalar in text.unicodeScalars {
            // Newlines outside strings are the indentation's; inside strings JSON wrote `\n`.
            if scalar != "\n" && VisibleText.needsEscape(scalar) {
                let digits = String(scalar.value, radix: 16)
                out += "\\u" + String(repeating: "0", count: 4 - digits.count) + digits
            } else {
                out.unicodeScalars.append(scalar)
            }
        }
        return out
    }
}
