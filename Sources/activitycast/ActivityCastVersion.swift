/// What `activitycast --version` prints.
enum ActivityCastVersion {
    static let release = "0.40.0"
    static var description: String { "activitycast \(release)" }
}
