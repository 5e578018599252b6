import Yams

/// Bounds on what aliases may expand to (an "alias bomb": `b: &b [*a, *a, …]`, `c: &c [*b, *b, …]`,
/// … grows tenfold per line). Yams resolves an alias to the anchored node itself, so composing is
/// cheap, but whatever walks the tree afterwards (this parser, and the payloads it would build)
/// meets every repetition.
extension RouteFileParser {
    /// A route file has a few hundred nodes (the shipped sports file 232, transit 210): 10,000 is
    /// far beyond any real one, and small enough that compiling it stays a matter of milliseconds.
    static let maxExpandedNodes = 10_000
    /// Text the aliases may repeat, in bytes (or the file's own size, if larger).
    static let maxExpandedTextBytes = 1 << 20

    /// Walks the composed tree, counting every node and every scalar's bytes as often as aliases
    /// repeat them, and stops at the first bound: at most `maxExpandedNodes` visits, whatever the
    /// file. The place reported is the outermost repeated node on the way there (the anchor whose
    /// aliases blow up), or the node itself.
    func checkExpansion(_ root: Node) throws(RouteError) {
        var walk = ExpansionWalk(nodes: Self.maxExpandedNodes, bytes: max(Self.maxExpandedTextBytes, yaml.utf8.count))
        if let (mark, what) = walk.visit(root, repeated: nil) {
            throw fail(at: mark, "aliases repeat this node until the file has more than \(what) once they are expanded; "
                + "a route file needs far less (an alias bomb?)")
        }
    }

    struct ExpansionWalk {
        var nodes: Int
        var bytes: Int
        let maxNodes: Int
        let maxBytes: Int
        /// The places of the nodes met so far: meeting one again means an alias repeats it.
        var seen: Set<Site> = []

        struct Site: Hashable {
            var line: Int
            var column: Int
            var kind: UInt8
        }

        init(nodes: Int, bytes: Int) {
            self.nodes = nodes
            self.bytes = bytes
            maxNodes = nodes
            maxBytes = bytes
        }

        /// The place and the bound crossed, or nil when the node and all it holds are within bounds.
        mutating func visit(_ node: Node, repeated: Mark?) -> (Mark?, String)? {
            var repeated = repeated
            if repeated == nil, let mark = node.mark {
                let kind: UInt8 = switch node {
                case .scalar: 0
                case .mapping: 1
                case .sequence: 2
                case .alias: 3
                }
                if !seen.insert(Site(line: mark.line, column: mark.column, kind: kind)).inserted { repeated = mark }
            }
            nodes -= 1
            if nodes < 0 { return (repeated ?? node.mark, "\(maxNodes) nodes") }
            switch node {
            case .scalar(let scalar):
                bytes -= scalar.string.utf8.count
                if bytes < 0 { return (repeated ?? node.mark, "\(maxBytes) bytes of text") }
            case .mapping(let mapping):
                for (key, value) in mapping {
                    if let found = visit(key, repeated: repeated) { return found }
                    if let found = visit(value, repeated: repeated) { return found }
                }
            case .sequence(let sequence):
                for item in sequence {
                    if let found = visit(item, repeated: repeated) { return found }
                }
            case .alias:
                break
            }
            return nil
        }
    }

    /// Yams checks each mapping for duplicate keys as it composes, by hashing the keys, and a key
    /// that is an alias (or a flow collection holding one) is hashed with everything it expands
    /// to: an alias bomb in a key takes hours before any check here could run. Route files need
    /// only text keys, so before composing a file that has aliases at all, this scan refuses a key
    /// that is or holds an alias, and explicit `? ` keys (which can span lines and hold anything).
    ///
    /// It follows YAML's lexical rules as far as they matter here: comments, quoted scalars, block
    /// scalars, flow collections, and where a node (so an alias or a key) can start. It is not a
    /// parser: a file it lets through is still composed and checked in full.
    func checkAliasKeys() throws(RouteError) {
        guard yaml.utf8.contains(UInt8(ascii: "*")) else { return }
        let s = Array(yaml.unicodeScalars)
        var i = 0
        var line = 1, lineStart = 0
        func column(_ at: Int) -> Int { at - lineStart + 1 }
        func isBlank(_ at: Int) -> Bool { at >= s.count || s[at] == " " || s[at] == "\t" || s[at] == "\n" || s[at] == "\r" }
        func isFlowIndicator(_ at: Int) -> Bool { at < s.count && ",[]{}".unicodeScalars.contains(s[at]) }
        func isAnchorChar(_ c: Unicode.Scalar) -> Bool {
            (c >= "0" && c <= "9") || (c >= "A" && c <= "Z") || (c >= "a" && c <= "z") || c == "_" || c == "-"
        }
        /// The next character after spaces and tabs on this line is a `:`.
        func colonFollows(_ at: Int) -> Bool {
            var j = at
            while j < s.count, s[j] == " " || s[j] == "\t" { j += 1 }
            return j < s.count && s[j] == ":"
        }
        /// The line's indentation is still to be read.
        var atLineStart = true
        /// Counts the line break at `i`; inside a quoted scalar (`inText`) the next line is its text.
        func newline(inText: Bool = false) {
            line += 1
            lineStart = i + 1
            atLineStart = !inText
        }
        let why = "keys in a route file are text, and an alias in a key would be expanded in full while the file is read"

        /// Whether each open flow collection (`[`, `{`) holds an alias so far.
        var flow: [Bool] = []
        /// A node may start here: at a line's start, after `- `, `: `, and in flow after `[`, `{`, `,`.
        var nodeStart = true
        /// The column (from 0) where the current node began: a key's, when a `: ` follows it.
        var nodeColumn = 0
        /// The indentation of the innermost block collection: the lines of a block scalar in it are
        /// indented further.
        var blockParent = 0
        /// While a block scalar's lines are skipped: the indentation they exceed.
        var blockScalarParent: Int?
        var previousBlank = true

        while i < s.count {
            if atLineStart {
                // A new line: its indentation, and whether it is a line of a block scalar.
                atLineStart = false
                var j = i
                while j < s.count, s[j] == " " { j += 1 }
                let indent = j - i
                let empty = j >= s.count || s[j] == "\n" || s[j] == "\r"
                if let parent = blockScalarParent {
                    if empty || indent > parent {
                        while i < s.count, s[i] != "\n" { i += 1 }
                        if i < s.count { newline(); i += 1 }
                        continue
                    }
                    blockScalarParent = nil
                }
                if flow.isEmpty {
                    nodeStart = true
                    blockParent = indent
                }
                previousBlank = true
                i = j
                continue
            }
            let c = s[i]
            switch c {
            case "\n":
                newline()
                i += 1
                continue
            case " ", "\t", "\r":
                previousBlank = true
                i += 1
                continue
            case "#" where previousBlank:
                while i < s.count, s[i] != "\n" { i += 1 }
                continue
            default:
                previousBlank = false
            }

            if nodeStart {
                if flow.isEmpty, c == "-", isBlank(i + 1) {
                    // A block sequence's entry: its node follows.
                    blockParent = column(i) - 1
                    i += 1
                    continue
                }
                nodeColumn = column(i) - 1
                switch c {
                case "\"", "'":
                    // A quoted scalar, over as many lines as it takes.
                    i += 1
                    while i < s.count, s[i] != c || (c == "'" && i + 1 < s.count && s[i + 1] == "'") {
                        if s[i] == "\n" {
                            newline(inText: true)
                        } else if c == "'" && s[i] == "'" || c == "\"" && s[i] == "\\" {
                            i += 1
                            if i < s.count, s[i] == "\n" { newline(inText: true) }
                        }
                        i += 1
                    }
                    i += 1
                    nodeStart = false
                    continue
                case "*":
                    let at = i
                    i += 1
                    while i < s.count, isAnchorChar(s[i]) { i += 1 }
                    if !flow.isEmpty { flow[flow.count - 1] = true }
                    if colonFollows(i) {
                        let name = String(String.UnicodeScalarView(s[at..<i]))
                        throw fail(line: line, column: column(at), "an alias can't be a key ('\(shown(name))'): \(why)")
                    }
                    nodeStart = false
                    continue
                case "&", "!":
                    // An anchor or a tag: the node itself follows.
                    while i < s.count, !isBlank(i), flow.isEmpty || !isFlowIndicator(i) { i += 1 }
                    continue
                case "?" where isBlank(i + 1) || (!flow.isEmpty && isFlowIndicator(i + 1)):
                    throw fail(line: line, column: column(i), "explicit keys ('? ') can't be used in a route file with "
                        + "aliases: \(why)")
                case "|", ">":
                    guard flow.isEmpty else { break }
                    // A block scalar: its lines are text, however they look.
                    blockScalarParent = blockParent
                    while i < s.count, s[i] != "\n" { i += 1 }
                    continue
                default:
                    break
                }
            }
            switch c {
            case "[", "{":
                if flow.isEmpty && !nodeStart {
                    nodeStart = false  // inside a plain scalar of the block context: text
                } else {
                    flow.append(false)
                    nodeStart = true
                }
            case "]", "}":
                if flow.isEmpty {
                    nodeStart = false
                    break
                }
                let heldAlias = flow.removeLast()
                if heldAlias, !flow.isEmpty { flow[flow.count - 1] = true }
                if heldAlias, colonFollows(i + 1) {
                    throw fail(line: line, column: column(i), "a list or mapping that holds an alias can't be a key: \(why)")
                }
                nodeStart = false
            case "," where !flow.isEmpty:
                nodeStart = true
            case ":" where !flow.isEmpty || isBlank(i + 1):
                // A value follows. In the block context, the key began a mapping at its column.
                if flow.isEmpty { blockParent = nodeColumn }
                nodeStart = true
            default:
                nodeStart = false
            }
            i += 1
        }
    }
}
